"""What a search learnt: each candidate's plan, starts and passes, its score as an estimate
with its interval (tune/estimate.py, filled by tune/race.py's verdicts), and the verdict: the
winner, the ties, the slower ones, and those never measured (pruned, refused, failed to start,
not started since they cannot win, out of budget)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..bench import stats
from .measure import LoadPoint, Pass
from .prune import Planned


@dataclass
class Start:
    visit: int
    startup_s: float
    error: str | None = None  # why the start failed
    log: str = ""
    url: str = ""  # where it served (its port is free again once the visit is over)
    # the whole visit, from the start through the measurement to the server stopped: on a real
    # server the stop and the ready-wait's tail are tens of seconds that neither startup_s nor
    # the passes count, and a budget that leaves them out admits a visit it cannot finish
    visit_s: float | None = None
    stop_s: float | None = None  # the server's stop and its port's release, counted in the summary
    machine: str | None = None  # host and card(s) it ran on (tune/machines.py); None in older journals


@dataclass
class CandidateResult:
    planned: Planned
    refused: list[str] = field(default_factory=list)  # the parser's complaints
    starts: list[Start] = field(default_factory=list)
    passes: list[Pass] = field(default_factory=list)
    verdict: str = ""
    why: str | None = None  # the verdict's numbers (the ratio to the winner and its interval)
    estimate: Any = None  # tune/estimate.py's Estimate, set with the verdicts

    @property
    def id(self) -> str:
        return self.planned.candidate.id

    @property
    def runnable(self) -> bool:
        return not self.refused and self.planned.pruned is None

    @property
    def failed_start(self) -> str | None:
        return next((s.error for s in self.starts if s.error), None)

    @property
    def scores(self) -> list[float]:
        """Each pass's score; a pass with no point inside the SLO scores 0."""
        return [p.score or 0.0 for p in self.passes]

    @property
    def median(self) -> float | None:
        return stats.median(self.scores) if self.passes else None

    @property
    def spread(self) -> tuple[float, float] | None:
        return (min(self.scores), max(self.scores)) if self.passes else None

    @property
    def meets_slo(self) -> bool:
        return any(p.score is not None for p in self.passes)

    def best_point(self) -> LoadPoint | None:
        """The point the score comes from in the pass closest to the median (the frontier's)."""
        points = [pt for p in self.passes for pt in p.points]
        inside = [pt for pt in points if pt.meets]
        pool = inside or points
        if not pool:
            return None
        return (
            max(pool, key=lambda pt: pt.per_gpu_tps or 0.0)
            if inside
            else min(pool, key=lambda pt: pt.slo_excess)
        )

    def closest_excess(self) -> float | None:
        points = [pt for p in self.passes for pt in p.points]
        return min((pt.slo_excess for pt in points), default=None)

    def reported(self) -> dict[str, Any]:
        return self.passes[0].reported if self.passes else {}

    def as_dict(self) -> dict[str, Any]:
        spread = self.spread
        return {
            **self.planned.as_dict(),
            "label": self.planned.candidate.label(),
            "refused": self.refused,
            "starts": [vars(s) for s in self.starts],
            "passes": [p.as_dict() for p in self.passes],
            "score_median": self.median,
            "score_spread": list(spread) if spread else None,
            "estimate": self.estimate.as_dict() if self.estimate else None,
            "closest_excess": self.closest_excess(),
            "missed_by": self.missed_by(),
            "reported": self.reported(),
            "verdict": self.verdict,
            "why": self.why,
        }

    def missed_by(self) -> str | None:
        """For a candidate with no point inside the SLO: its closest point and by how much it
        missed (the worst figure's share over its target)."""
        if not self.passes or self.meets_slo:
            return None
        excess = self.closest_excess()
        point = min((pt for p in self.passes for pt in p.points), key=lambda pt: pt.slo_excess)
        if excess is None or excess == float("inf"):
            return f"c={point.concurrency}: no request finished"
        return (
            f"c={point.concurrency}: {point.per_gpu_tps or 0:.1f} tok/s/GPU, its worst figure "
            f"x{excess:.2f} off its target"
        )
