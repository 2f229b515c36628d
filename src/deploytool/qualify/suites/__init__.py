"""The registry of qualification suites, in the order they run.

Adding a suite is one line: write `qualify/suites/<name>.py` (or a package `<name>/` holding the
helpers only that suite uses) with the interface described in `qualify/suite_api.py` (name,
Settings, applies_to, run) and add its module name below.
Cheap suites come first, so a broken server fails in seconds, not after GSM8K.
"""

from __future__ import annotations

import importlib
from types import ModuleType

SUITE_MODULES = [
    "preflight",
    "contract",
    "vision",
    "tools",
    "needle",
    "gsm8k",
    "stress",
    "performance",
]


def registry() -> dict[str, ModuleType]:
    """name -> suite module, in run order."""
    out: dict[str, ModuleType] = {}
    for module_name in SUITE_MODULES:
        module = importlib.import_module(f"{__name__}.{module_name}")
        out[module.name] = module
    return out
