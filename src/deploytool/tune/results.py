"""What a search learnt: each candidate's plan, starts and passes, its score with its spread,
and the verdicts: the winner, the ties (ranges that overlap the winner's are not beaten by it),
the slower ones, and those never measured (pruned, refused, failed to start, out of budget)."""

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
    machine: str | None = None  # host and card(s) it ran on (tune/machines.py); None in older journals


@dataclass
class CandidateResult:
    planned: Planned
    refused: list[str] = field(default_factory=list)  # the parser's complaints
    starts: list[Start] = field(default_factory=list)
    passes: list[Pass] = field(default_factory=list)
    verdict: str = ""

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
        return max(pool, key=lambda pt: pt.per_gpu_tps or 0.0) if inside else min(pool, key=lambda pt: pt.slo_excess)

    def closest_excess(self) -> float | None:
        points = [pt for p in self.passes for pt in p.points]
        return min((pt.slo_excess for pt in points), default=None)

    def reported(self) -> dict[str, Any]:
        return self.passes[0].reported if self.passes else {}

    def as_dict(self) -> dict[str, Any]:
        spread = self.spread
        return {**self.planned.as_dict(), "label": self.planned.candidate.label(), "refused": self.refused,
                "starts": [vars(s) for s in self.starts], "passes": [p.as_dict() for p in self.passes],
                "score_median": self.median, "score_spread": list(spread) if spread else None,
                "reported": self.reported(), "verdict": self.verdict}


def overlaps(a: tuple[float, float] | None, b: tuple[float, float] | None, margin: float = 0.0) -> bool:
    """Do two ranges meet, each widened by `margin` of itself (the measurement's resolution:
    two passes that agree to the last digit still do not make a 1% difference real)?"""
    if a is None or b is None:
        return False
    return a[0] * (1 - margin) <= b[1] * (1 + margin) and b[0] * (1 - margin) <= a[1] * (1 + margin)


def contenders_after(results: list[CandidateResult], members: list[str], margin: float = 0.0) -> list[str]:
    """Successive halving: of a round's members, those whose range still meets the leader's
    (the leader: the highest median), so more passes could still turn the order; a failed
    start is out."""
    # a candidate with no load level inside the SLO has nothing to win: no more passes for it
    measured = [r for r in results if r.id in members and r.passes and not r.failed_start and r.meets_slo]
    if not measured:
        return []
    leader = max(measured, key=lambda r: r.median or 0.0)
    return [r.id for r in measured if r is leader or overlaps(r.spread, leader.spread, margin)]


def decide(results: list[CandidateResult], margin: float = 0.0) -> tuple[CandidateResult | None, list[CandidateResult]]:
    """The winner (highest median score among those with a point inside the SLO) and the
    candidates tied with it; every verdict filled in."""
    for r in results:
        if r.refused:
            r.verdict = "refused by the parser"
        elif r.planned.pruned:
            r.verdict = "pruned by the plan"
        elif r.failed_start:
            r.verdict = "failed to start"
        elif not r.passes:
            r.verdict = "not measured (budget)"
        elif not r.meets_slo:
            r.verdict = "no point inside the SLO"
    qualified = [r for r in results if r.passes and r.meets_slo and not r.failed_start]
    if not qualified:
        return None, []
    winner = max(qualified, key=lambda r: (r.median or 0.0, r.id == "base"))
    ties = [r for r in qualified if r is not winner and overlaps(r.spread, winner.spread, margin)]
    for r in qualified:
        r.verdict = "winner" if r is winner else ("tie" if r in ties else "slower")
    return winner, ties
