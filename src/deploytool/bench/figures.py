"""A figure of one pass, and one figure per key over passes (median and spread): what every
workload's `figures` returns and what a run reports (docs/bench.md, "The figures")."""

from __future__ import annotations

from . import stats
from .results import Better, Figure, GroupSummary


def figure(
    key: str,
    label: str,
    unit: str,
    better: Better,
    group: GroupSummary | None,
    samples: list[float | None] | None = None,
    value: float | None = None,
) -> Figure:
    """One pass's figure: the median of `samples` (per-request values), or `value` (an aggregate,
    kept as a one-value sample). A contaminated group gives no value."""
    if group is not None and group.contaminated:
        return Figure(key, label, None, unit, better, group.completed, group.failed)
    data = [v for v in (samples or []) if v is not None]
    if samples is not None:
        value = stats.median(data)
    elif value is not None:
        data = [value]
    return Figure(
        key=key,
        label=label,
        value=value,
        unit=unit,
        better=better,
        completed=group.completed if group else 0,
        failed=group.failed if group else 0,
        samples=[data],
    )


def merge_passes(passes: list[list[Figure]]) -> list[Figure]:
    """One figure per key: the median over passes of each pass's value, its spread, every pass's
    samples (what compare and the regression rule resample)."""
    order: list[str] = []
    for figs in passes:
        order += [f.key for f in figs if f.key not in order]
    out = []
    for key in order:
        per_pass = [next((f for f in figs if f.key == key), None) for figs in passes]
        proto = next(f for f in per_pass if f is not None)
        values = [f.value if f else None for f in per_pass]
        out.append(
            Figure(
                key=key,
                label=proto.label,
                value=stats.median(values),
                unit=proto.unit,
                better=proto.better,
                completed=sum(f.completed for f in per_pass if f),
                failed=sum(f.failed for f in per_pass if f),
                samples=[(f.samples[0] if f and f.samples else []) for f in per_pass],
                repeat_values=values,
                spread=list(stats.spread(values) or []) or None,
            )
        )
    return out
