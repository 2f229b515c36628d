"""The race: which candidate to start next, when a live server deserves another pass, and the
verdicts, all pure functions of what was measured (so the journal is all `--resume` needs).

1. Explore in the order of the prediction (tune/predict.py), the profile's own launch first
   (every ratio is against it); an unstarted candidate whose prediction, calibrated on what was
   measured and widened by `predict_slack`, stays under the leader's interval is never started.
   A candidate with the memory fraction of one that ran out of memory at start, or a higher
   one, is not started either: the same lesson, not a second start.
2. Race: a measured candidate stays in while the leader does not beat it (the ratio's interval
   excludes 1) and the two are not equal within `tie_margin`; the leader gets a second start
   (the restart-to-restart noise a user will see) before it can be declared; among those left,
   the one with the fewest starts goes next, the order reversed each round (A B, then B A) so
   drift hits both alike; at most `rounds` starts a candidate. A rival is *settled* (no more
   starts or passes, a tie) once even the most evidence the race allows could not decide the
   pair: both at `rounds` starts of `max_passes` passes, the ratio as measured so far, and the
   normal quantile in place of Student's (the best case): if that interval would still neither
   exclude 1 nor fit inside the tie margin, another start only costs minutes (futility).
3. On a live server, more passes (up to `max_passes`) while its candidate is still in a race:
   a pass costs seconds, a start minutes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

from .estimate import Estimate, Noise, beats, equal, estimate, pooled_noise, ratio_interval
from .predict import calibration, predicted


@dataclass
class Standing:
    estimates: dict[str, Estimate]
    noise: Noise
    preds: dict[str, float]
    leader: str | None = None
    alive: list[str] = field(default_factory=list)  # measured and still able to win, leader first
    equal: list[str] = field(default_factory=list)  # the leader's speed within tie_margin
    slower: list[str] = field(default_factory=list)  # beaten by the leader beyond the interval
    settled: list[str] = field(default_factory=list)  # alive, but no evidence left could decide it
    skipped: dict[str, str] = field(default_factory=dict)  # never started, and why
    explore: list[str] = field(default_factory=list)  # not started yet, in predicted order


def _mem_fraction(r: Any) -> float | None:
    v = r.planned.candidate.profile.server.args.get("mem-fraction-static")
    return float(v) if isinstance(v, (int, float)) else None


def _oom(error: str | None) -> bool:
    text = (error or "").lower()
    return "out of memory" in text or "outofmemory" in text


def _futile(
    lead: Estimate, other: Estimate, noise: Noise, best_between: float, space: Any, sure: float
) -> bool:
    """Not even the race's whole allowance could decide this pair at the ratio measured so far:
    both at `rounds` starts of `max_passes` passes (a figure measured past that keeps its own,
    smaller, error), and the normal quantile (the t quantile's limit as evidence grows)."""
    per_pass = max(space.max_passes, space.repeats)
    # the best case of restart noise: as measured once one restart is in (the floor that
    # start_noise puts under it until three are in is caution, not evidence)
    between = min(noise.between, best_between) if noise.df_between else noise.between
    se_most = math.sqrt((between + noise.within / per_pass) / space.rounds)
    se_pair = math.hypot(min(lead.se, se_most), min(other.se, se_most))
    d = lead.log_mean - other.log_mean  # >= 0: the leader has the highest mean
    can_beat = d - NormalDist().inv_cdf(0.5 + sure / 2) * se_pair > 0
    can_equal = space.tie_margin > 0 and (
        abs(d) + NormalDist().inv_cdf(0.5 + space.confidence / 2) * se_pair <= math.log1p(space.tie_margin)
    )
    return not (can_beat or can_equal)


def standing(results: list[Any], space: Any) -> Standing:
    noise = pooled_noise(results, space.start_noise)
    raw = pooled_noise(results, 0.0)  # the same, without the assumed floor under restart noise
    ests = {r.id: e for r in results if not r.failed_start and (e := estimate(r, noise, space.confidence))}
    preds = {r.id: predicted(r.planned, space) for r in results if r.runnable}
    st = Standing(ests, noise, preds)
    if ests:
        st.leader = max(ests, key=lambda cid: (ests[cid].mean, cid == "base"))
        lead = ests[st.leader]
        st.alive = [st.leader]
        # the leader is compared with every other at once: Bonferroni's split of the error rate
        # keeps the chance of any wrong "beats" at 1 - confidence, not that per pair
        sure = 1 - (1 - space.confidence) / max(1, len(ests) - 1)
        for cid, e in ests.items():
            if cid == st.leader:
                continue
            # equal first: a difference the interval resolves but that lies inside the margin (two
            # launches 0.1% apart on a quiet machine) is no reason to change a launch
            if equal(lead, e, noise, space.confidence, space.tie_margin):
                st.equal.append(cid)
            elif beats(lead, e, noise, sure):
                st.slower.append(cid)
            else:
                st.alive.append(cid)
                if _futile(lead, e, noise, raw.between, space, sure):
                    st.settled.append(cid)
    cal = calibration(results, ests, preds)
    oom_fractions = [f for r in results if _oom(r.failed_start) and (f := _mem_fraction(r)) is not None]
    unstarted = [r for r in results if r.runnable and not r.starts]
    order = sorted(unstarted, key=lambda r: (r.id != "base", -preds.get(r.id, 0.0), r.id))
    for r in order:
        frac = _mem_fraction(r)
        if r.id != "base" and frac is not None and any(frac >= f for f in oom_fractions):
            st.skipped[r.id] = (
                f"not started: a candidate with mem-fraction-static {min(oom_fractions):g} "
                "ran out of memory at start, and this one leaves less outside the pool"
            )
            continue
        if r.id != "base" and st.leader and cal and space.predict_slack is not None:
            best_case = preds[r.id] * cal[1] * (1 + space.predict_slack)
            if best_case < ests[st.leader].low:
                st.skipped[r.id] = (
                    f"not started: predicted at most {best_case:.1f} tok/s/GPU (running "
                    f"limit {r.planned.running_limit}, calibrated on the measured, "
                    f"+{space.predict_slack:.0%}), under the leader's "
                    f"{ests[st.leader].low:.1f}"
                )
                continue
        st.explore.append(r.id)
    return st


def next_visit(results: list[Any], space: Any) -> str | None:
    st = standing(results, space)
    if st.explore:
        return st.explore[0]
    if st.leader is None:
        return None
    starts = {r.id: len(r.starts) for r in results}
    lead_starts = starts[st.leader]
    if lead_starts < min(space.min_starts, space.rounds):
        return st.leader
    racing = _racing(st)
    if len(racing) <= 1:
        return None
    open_ = [cid for cid in racing if starts[cid] < space.rounds]
    if not open_:
        return None
    fewest = min(starts[c] for c in open_)
    level = [c for c in racing if starts[c] == fewest and c in open_]
    # each round's order the reverse of the round before (A B, then B A): drift hits both alike
    return level[0] if fewest % 2 == 0 else level[-1]


def wants_more_passes(results: list[Any], space: Any, cid: str, passes_this_visit: int) -> bool:
    if passes_this_visit >= space.max_passes:
        return False
    st = standing(results, space)
    racing = _racing(st)
    if cid not in racing:
        return False
    # a race to settle: the candidate is the leader with rivals, or a rival of it
    return len(racing) > 1 or bool(st.explore and cid == st.leader and len(st.estimates) > 1)


def _racing(st: Standing) -> list[str]:
    """The leader and the rivals more evidence could still decide."""
    return [c for c in st.alive if c not in st.settled]


def visits_left(results: list[Any], space: Any) -> int:
    """What the race will still start, as it stands: the unstarted it would explore, the
    leader's second start, and the rivals up to `rounds` starts."""
    st = standing(results, space)
    starts = {r.id: len(r.starts) for r in results}
    left = len(st.explore)
    if st.leader is not None:
        left += max(0, min(space.min_starts, space.rounds) - starts[st.leader])
        left += sum(max(0, space.rounds - starts[c]) for c in _racing(st) if c != st.leader)
    elif st.explore:
        left += 1  # the first leader's second start
    return left


def decide(results: list[Any], space: Any) -> tuple[Any | None, list[Any], Standing]:
    """The winner (the leader among the candidates with a point inside the SLO), the candidates
    tied with it, every verdict filled in."""
    st = standing(results, space)
    by_id = {r.id: r for r in results}
    for r in results:
        r.estimate = st.estimates.get(r.id)
        if r.refused:
            r.verdict = "refused by the parser"
        elif r.planned.pruned:
            r.verdict = "pruned by the plan"
        elif r.failed_start:
            r.verdict = "failed to start"
        elif r.id in st.skipped:
            r.verdict = "not started (cannot win)"
            r.why = st.skipped[r.id]
        elif not r.passes:
            r.verdict = "not measured (budget)"
        elif not r.meets_slo:
            r.verdict = "no point inside the SLO"
    if st.leader is None:
        return None, [], st
    winner = by_id[st.leader]
    lead = st.estimates[st.leader]
    ties = [by_id[c] for c in st.alive[1:] + st.equal]
    winner.verdict = "winner"
    for cid in st.alive[1:]:
        by_id[cid].verdict = "tie"
        words = (
            "not told apart, nor could be within the race's starts"
            if cid in st.settled
            else "not told apart at this evidence"
        )
        by_id[cid].why = _vs(lead, st.estimates[cid], st, space, words)
    for cid in st.equal:
        by_id[cid].verdict = "tie"
        by_id[cid].why = _vs(lead, st.estimates[cid], st, space, f"equal within {space.tie_margin:.0%}")
    for cid in st.slower:
        by_id[cid].verdict = "slower"
        by_id[cid].why = _vs(lead, st.estimates[cid], st, space, "beyond the interval")
    return winner, ties, st


def _vs(lead: Estimate, other: Estimate, st: Standing, space: Any, words: str) -> str:
    ratio, low, high = ratio_interval(lead, other, st.noise, space.confidence)
    return f"the winner x{ratio:.3f} [{low:.3f}, {high:.3f}] over it: {words}"
