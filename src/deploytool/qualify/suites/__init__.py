"""The registry of qualification suites, in the order they run.

Adding a suite is one line: write `qualify/suites/<name>.py` (or a package `<name>/` holding the
helpers only that suite uses) with the interface described in `qualify/suite_api.py` (name,
Settings, applies_to, run) and add its module name below.
Cheap suites come first, so a broken server fails in seconds, not after GSM8K.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..suite_api import Suite

SUITE_MODULES = ["preflight", "contract", "vision", "tools", "needle", "gsm8k", "stress", "performance"]

if TYPE_CHECKING:
    # The same check as registry() makes when it loads them, made by mypy: each module is a Suite.
    # (Imported here for the type checker only: a run loads the suites by name, on first use.)
    from . import contract, gsm8k, needle, performance, preflight, stress, tools, vision

    _SUITES: tuple[Suite, ...] = (preflight, contract, vision, tools, needle, gsm8k, stress, performance)


def registry() -> dict[str, Suite]:
    """name -> suite module, in run order; each checked to be a Suite (suite_api.py)."""
    out: dict[str, Suite] = {}
    for module_name in SUITE_MODULES:
        module = importlib.import_module(f"{__name__}.{module_name}")
        if not isinstance(module, Suite) or not _takes(module.applies_to, 2) or not _takes(module.run, 1):
            raise TypeError(
                f"qualify suite {module_name} does not have the interface of qualify/suite_api.py's "
                "Suite: name, Settings, applies_to(profile, server), run(ctx)"
            )
        out[module.name] = module
    return out


def _takes(function: Callable[..., Any], count: int) -> bool:
    """Whether `function` can be called with `count` positional arguments."""
    try:
        inspect.signature(function).bind(*range(count))
    except (TypeError, ValueError):
        return False
    return True
