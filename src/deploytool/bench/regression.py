"""Is B worse than A? The rule `compare` prints and the qualify performance gate applies
(docs/bench.md, "Comparisons that survive noise").

For each figure: the ratio B / A of the figures' values (medians over repeats), and a 95%
interval for it from a two-level bootstrap over both runs' per-request values (repeats
resampled, then requests within them: stats.bootstrap_ratio). Then

- "no difference measured" when the interval spans 1;
- a regression only when B is worse than A by more than the threshold (max_regression_pct)
  AND the whole interval lies on the worse side of 1, i.e. the slowdown is larger than what the
  measured spread of both runs allows; a time figure (TTFT) must also be worse by at least
  floor_s seconds (a few milliseconds of scheduling noise on a fast server is never one).

Runs stored without per-request samples (older results) get the threshold alone, and say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import stats


@dataclass
class Change:
    key: str
    label: str
    unit: str
    better: str
    before: float | None
    after: float | None
    ratio: float | None  # after / before
    low: float | None  # the ratio's 95% interval
    high: float | None
    worse_pct: float | None  # how much worse, in the figure's direction (negative: better)

    @property
    def interval(self) -> tuple[float, float] | None:
        """(low, high) of the ratio, when both ends were measured."""
        return (self.low, self.high) if self.low is not None and self.high is not None else None

    @property
    def has_interval(self) -> bool:
        return self.interval is not None

    @property
    def no_difference(self) -> bool:
        interval = self.interval
        return interval is not None and interval[0] <= 1.0 <= interval[1]

    @property
    def beyond_spread_worse(self) -> bool | None:
        """The whole interval on the worse side of 1; None without an interval."""
        if self.interval is None:
            return None
        low, high = self.interval
        return high < 1.0 if self.better == "higher" else low > 1.0

    def interval_text(self) -> str:
        if not self.has_interval:
            return ""
        return f"[{self.low:.2f}-{self.high:.2f}]"

    def regression(self, max_pct: float, floor_s: float = 0.0) -> tuple[bool, str]:
        """(regressed, why): the rule in the module docstring."""
        if self.worse_pct is None or self.better == "neither":
            return False, "not comparable"
        if self.worse_pct <= max_pct:
            return False, f"{self.worse_pct:+.1f}% worse, within the {max_pct:g}% threshold"
        if (
            self.unit == "s"
            and self.before is not None
            and self.after is not None
            and abs(self.after - self.before) < floor_s
        ):
            return False, f"within the {floor_s:g} s noise floor, not a regression"
        beyond = self.beyond_spread_worse
        if beyond is None:
            return True, f"{self.worse_pct:.1f}% worse (no per-request samples to test against the spread)"
        if not beyond:
            return False, (
                f"{self.worse_pct:.1f}% worse, but the interval {self.interval_text()} includes no "
                "difference: within the measured spread"
            )
        return (
            True,
            f"{self.worse_pct:.1f}% worse, interval {self.interval_text()} beyond the measured spread",
        )


def change(before: dict[str, Any] | Any, after: dict[str, Any] | Any) -> Change:
    """Figures as objects (results.Figure) or dicts (stored qualify figures)."""
    b, a = _as_dict(before), _as_dict(after)
    vb, va = b.get("value"), a.get("value")
    ratio = (va / vb) if (va is not None and vb) else None
    worse = None
    if ratio is not None and a.get("better") in ("higher", "lower"):
        worse = (1 - ratio) * 100 if a["better"] == "higher" else (ratio - 1) * 100
    low = high = None
    if b.get("samples") and a.get("samples"):
        boot = stats.bootstrap_ratio(b["samples"], a["samples"], seed=_seed(a.get("key", "")))
        if boot is not None:
            _, low, high = boot
    return Change(
        key=a.get("key", ""),
        label=a.get("label", ""),
        unit=a.get("unit", ""),
        better=a.get("better", "neither"),
        before=vb,
        after=va,
        ratio=ratio,
        low=low,
        high=high,
        worse_pct=worse,
    )


def _as_dict(fig: Any) -> dict[str, Any]:
    if isinstance(fig, dict):
        return fig
    return {k: getattr(fig, k, None) for k in ("key", "label", "unit", "better", "value", "samples")}


def _seed(key: str) -> int:
    """A fixed seed per figure: the same two runs always give the same interval."""
    return sum(key.encode()) if key else 0
