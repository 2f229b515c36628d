"""The named workloads (`deploytool bench --workload NAME`), one module each, in the manner of
guidellm's benchmark profiles: each module has

    name          its --workload name
    summary       one line for --help and docs/bench.md
    Settings      a pydantic model of its sizes (extra keys refused); defaults are the source's
    QUICK         smaller sizes for a CPU / smoke run (`--quick`), noted in the run
    run(ctx)      runs one pass: ctx.measure(...) per phase, returns nothing
    figures(ctx)  the figures of one pass, from its groups and requests

`table` is the source's table (its sizes are BenchMethod's own fields, for compatibility).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from pydantic import ValidationError

from . import agentic, input_ablation, long_context, open_loop, table

REGISTRY: dict[str, ModuleType] = {
    m.name: m for m in (table, long_context, agentic, open_loop, input_ablation)
}


def get(name: str) -> ModuleType:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown workload {name!r} (known: {', '.join(REGISTRY)})") from None


def resolve_settings(name: str, preset: str, given: dict[str, Any] | None) -> dict[str, Any]:
    """Defaults < the quick sizes (quick preset) < what was given; validated by the workload."""
    module = get(name)
    values = {**(module.QUICK if preset == "quick" else {}), **(given or {})}
    try:
        return module.Settings.model_validate(values).model_dump(mode="json")
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: "
            + ("unknown setting" if e["type"] == "extra_forbidden" else e["msg"])
            for e in exc.errors()
        )
        raise ValueError(
            f"workload {name}: {problems} (settings: {', '.join(module.Settings.model_fields)})"
        ) from None
