"""Paired comparison of two releases on the same questions: McNemar's exact test.

Only the discordant questions carry information: b = right before and wrong now, c = wrong
before and right now. Under "no change", each discordant question is a fair coin, so the
two-sided exact p-value is 2 * P(Binomial(b + c, 1/2) <= min(b, c)), capped at 1.
Outcomes are stored as strings of '1' (right) and '0' (wrong), one character per question in
test-set order, so two results.json files compare without any other bookkeeping.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb


def mcnemar_exact_p(b: int, c: int) -> float:
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(comb(n, k) for k in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


@dataclass
class PairedComparison:
    questions: int  # compared (the common prefix of both runs)
    before_correct: int
    now_correct: int
    got_worse: list[int]  # indexes right before, wrong now
    got_better: list[int]
    p_value: float

    def regressed(self, alpha: float) -> bool:
        return len(self.got_worse) > len(self.got_better) and self.p_value < alpha

    def as_dict(self, shown: int = 50) -> dict:
        return {
            "questions": self.questions,
            "before_correct": self.before_correct,
            "now_correct": self.now_correct,
            "got_worse": len(self.got_worse),
            "got_better": len(self.got_better),
            "p_value": round(self.p_value, 6),
            "flipped_to_wrong": self.got_worse[:shown],
            "flipped_to_right": self.got_better[:shown],
        }


def compare(before: str, now: str) -> PairedComparison:
    n = min(len(before), len(now))
    worse = [i for i in range(n) if before[i] == "1" and now[i] == "0"]
    better = [i for i in range(n) if before[i] == "0" and now[i] == "1"]
    return PairedComparison(
        questions=n,
        before_correct=before[:n].count("1"),
        now_correct=now[:n].count("1"),
        got_worse=worse,
        got_better=better,
        p_value=mcnemar_exact_p(len(worse), len(better)),
    )
