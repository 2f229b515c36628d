"""tune's race and verdicts, on measured figures given by hand: intervals that narrow with
passes and starts, candidates started in the order of the prediction and left unstarted when
the prediction cannot reach the leader, a second start for the leader, ties in numbers (equal
within tie_margin, or not told apart at the evidence), a failed start is out; the space's parsing."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from deploytool.errors import FieldError, UsageError
from deploytool.profiles import ProfileStore
from deploytool.tune.estimate import estimate, pooled_noise, t_quantile
from deploytool.tune.measure import LoadPoint, Pass
from deploytool.tune.prune import Planned
from deploytool.tune.race import decide as race_decide
from deploytool.tune.results import CandidateResult, Start
from deploytool.tune.run import runtime_note
from deploytool.tune.search import Search, estimate_s, next_visit
from deploytool.tune.space import (
    Candidate,
    TuneSpace,
    candidates,
    parse_budget,
    parse_slo,
    recipe_defaults,
    slo_over,
    with_args,
)


def _profile():
    return ProfileStore().get("sim")


def _result(cid: str, **args) -> CandidateResult:
    profile = _profile()
    if args:
        profile = with_args(profile, {**profile.server.args, **args})
    return CandidateResult(planned=Planned(Candidate(cid, {}, profile)))


def _measure(r: CandidateResult, *scores: float | None) -> None:
    visit = len(r.starts)
    r.starts.append(Start(visit=visit, startup_s=1.0))
    for i, s in enumerate(scores):
        point = LoadPoint(8, s, 10.0, 1, 2, 3, 4, 8, 0, 1.0 if s else 0.0, 0.5 if s else 2.0)
        r.passes.append(Pass(r.id, visit, i, [point], s))


def _search(ids: list[str], rounds: int = 3, **space) -> Search:
    s = Search(
        _profile(), TuneSpace(flags={"x": [1]}, rounds=rounds, **space), parse_slo(None), Path("/nonexistent")
    )
    s.results = [_result(i) for i in ids]
    return s


def decide(s: Search):
    winner, ties, _ = race_decide(s.results, s.space)
    return winner, ties


def test_t_quantiles_match_the_table() -> None:
    for df, want in ((1, 12.706), (2, 4.303), (3, 3.182), (5, 2.571), (10, 2.228), (30, 2.042)):
        assert t_quantile(0.975, df) == pytest.approx(want, abs=5e-3)


def test_an_interval_narrows_as_passes_and_starts_grow_where_a_range_only_widens() -> None:
    r = _result("c01")
    _measure(r, 100.0, 104.0)
    first = estimate(r, pooled_noise([r], 0.03), 0.95)
    _measure(r, 97.0, 103.0, 101.0, 99.0)
    _measure(r, 102.0, 98.0, 100.5)
    later = estimate(r, pooled_noise([r], 0.03), 0.95)
    assert first is not None and later is not None
    assert later.high - later.low < (first.high - first.low) / 3
    assert later.low < 100.3 < later.high
    # the [min, max] of the passes grew meanwhile
    assert (max(r.scores) - min(r.scores)) > 104.0 - 100.0


def test_a_clear_leader_gets_a_second_start_then_the_race_ends() -> None:
    s = _search(["base", "c01"])
    assert next_visit(s) == "base"  # every ratio is against the profile's own launch: it goes first
    _measure(s.by_id("base"), 100, 101)
    _measure(s.by_id("c01"), 400, 402)
    assert next_visit(s) == "c01"  # the restart-to-restart noise, before it is declared
    _measure(s.by_id("c01"), 401, 399)
    assert next_visit(s) is None
    winner, ties = decide(s)
    assert winner is not None and winner.id == "c01" and ties == []
    assert s.by_id("base").verdict == "slower" and "beyond the interval" in s.by_id("base").why


def test_a_candidate_the_prediction_puts_below_the_leader_is_never_started() -> None:
    s = _search([])
    s.results = [
        _result("base"),
        _result("c01", **{"max-running-requests": 2}),
        _result("c02", **{"max-running-requests": 32}),
    ]
    assert next_visit(s) == "base"
    _measure(s.by_id("base"), 800, 810)  # 8 running
    assert next_visit(s) == "c02"  # predicted 4x the profile's own: measured next
    _measure(s.by_id("c02"), 3200, 3230, 3190)
    # 2 running: at most 2/8 of the profile's own launch (+30%), far under c02's interval
    assert next_visit(s) == "c02"
    _measure(s.by_id("c02"), 3210, 3200)
    assert next_visit(s) is None
    winner, _ = decide(s)
    assert winner.id == "c02" and s.by_id("c01").starts == []
    assert s.by_id("c01").verdict == "not started (cannot win)" and "under the leader's" in s.by_id("c01").why


def test_the_time_left_follows_the_race_not_a_grid() -> None:
    from deploytool.tune.race import visits_left

    s = _search([])
    s.results = [
        _result("base"),
        _result("c01", **{"max-running-requests": 2}),
        _result("c02", **{"max-running-requests": 32}),
        _result("c03", **{"max-running-requests": 1}),
    ]
    assert visits_left(s.results, s.space) == 5  # four to explore, then the leader's second start
    _measure(s.by_id("base"), 800, 810)
    _measure(s.by_id("c02"), 3200, 3230, 3190)
    # c01 and c03 cannot catch c02 by the prediction: only c02's second start is left
    assert visits_left(s.results, s.space) == 1
    for r in s.results:
        for start in r.starts:
            start.visit_s = 120.0
    assert estimate_s(s) == pytest.approx(120.0)


def test_equal_within_the_margin_is_a_tie_and_so_is_what_the_evidence_cannot_tell_apart() -> None:
    s = _search(["base", "c01", "c02"], rounds=2, tie_margin=0.05, start_noise=0.005)
    for cid, scores in (
        ("base", (100, 100.5, 99.8, 100.2)),
        ("c01", (100.3, 99.9, 100.1, 100.4)),
        ("c02", (60, 60.5, 60.2)),
    ):
        _measure(s.by_id(cid), *scores)
    _measure(s.by_id("c01"), 100.2, 100.0)
    _measure(s.by_id("base"), 100.1, 99.9)
    assert next_visit(s) is None
    winner, ties = decide(s)
    assert {winner.id, *(t.id for t in ties)} == {"base", "c01"}
    assert "equal within 5%" in next(r for r in s.results if r.verdict == "tie").why
    # a 3% gap the passes' noise cannot resolve within `rounds` starts: a tie, not a winner
    s = _search(["base", "c01"], rounds=2, tie_margin=0.0)
    _measure(s.by_id("base"), 100, 110, 95)
    _measure(s.by_id("c01"), 103, 113, 98)
    _measure(s.by_id("c01"), 99, 108)
    _measure(s.by_id("base"), 104, 96)
    assert next_visit(s) is None
    winner, ties = decide(s)
    assert winner.id == "c01" and [t.id for t in ties] == ["base"] and "not told apart" in ties[0].why


def test_failed_starts_and_slo_misses_are_never_winners() -> None:
    s = _search(["base", "c01", "c02"])
    s.by_id("c01").starts.append(Start(visit=0, startup_s=5.0, error="the server exited with status 1"))
    _measure(s.by_id("base"), None, None)
    _measure(s.by_id("c02"), None)
    assert next_visit(s) is None
    winner, _ = decide(s)
    assert winner is None
    assert s.by_id("c01").verdict == "failed to start"
    assert s.by_id("base").verdict == "no point inside the SLO"


def test_an_out_of_memory_start_is_one_lesson_not_two() -> None:
    s = _search([])
    s.results = [
        _result("base"),
        _result("c01", **{"mem-fraction-static": 0.95}),
        _result("c02", **{"mem-fraction-static": 0.97}),
    ]
    _measure(s.by_id("base"), 100, 101)
    s.by_id("c01").starts.append(
        Start(visit=0, startup_s=5.0, error="torch.OutOfMemoryError: CUDA out of memory")
    )
    assert next_visit(s) == "base"  # c02 leaves even less outside the pool: not started
    decide(s)
    assert s.by_id("c02").verdict == "not started (cannot win)" and "ran out of memory" in s.by_id("c02").why


def test_candidates_are_the_product_without_the_profile_s_own_launch() -> None:
    profile = _profile()
    own, prefill = profile.server.args["decode-tps"], profile.server.args["prefill-tps"]
    cands = candidates(profile, TuneSpace(flags={"decode-tps": [own, 400], "prefill-tps": [prefill, 1000]}))
    assert [c.id for c in cands] == ["base", "c01", "c02", "c03"]  # (own, own) is the base
    assert cands[1].changes == {"prefill-tps": 1000}
    assert cands[3].changes == {"decode-tps": 400, "prefill-tps": 1000}
    assert cands[3].profile.server.args["decode-tps"] == 400 and profile.server.args["decode-tps"] == own
    with pytest.raises(UsageError, match="more than max_candidates"):
        candidates(profile, TuneSpace(flags={"decode-tps": list(range(1, 10))}, max_candidates=4))


def test_sglang_recipe_defaults_centre_on_the_profile() -> None:
    profile = ProfileStore().get("h200-qwen3.6-35b-a3b-fp8")
    flags, derived = recipe_defaults(profile)
    mfs = profile.server.args["mem-fraction-static"]
    assert mfs in flags["mem-fraction-static"] and len(flags["mem-fraction-static"]) == 3
    assert profile.server.args.get("max-running-requests") in flags["max-running-requests"]
    assert "cuda-graph-max-bs" in derived
    assert recipe_defaults(_profile()) == ({}, [])


def test_slo_and_budget_parsing() -> None:
    slo = parse_slo("ttft_p99_ms=2000, min_user_tps=20")
    assert (slo.ttft_p99_ms, slo.tpot_p99_ms, slo.min_user_tps) == (2000, None, 20)
    for bad in ("ttft=1", "ttft_p99_ms=fast", "tpot_p99_ms=-1"):
        with pytest.raises(FieldError) as refused:
            parse_slo(bad)
        assert refused.value.field == "slo" and str(refused.value).startswith(f"slo {bad!r}: ")
    # the targets given replace the space's own; the rest of the space's hold
    space = TuneSpace(slo={"ttft_p99_ms": 500, "tpot_p99_ms": 40})
    merged = slo_over(space, slo)
    assert (merged.ttft_p99_ms, merged.tpot_p99_ms, merged.min_user_tps) == (2000, 40, 20)
    assert slo_over(space, parse_slo(None)) == space.slo
    assert parse_budget("90m") == 5400 and parse_budget("2h") == 7200 and parse_budget("600") == 600
    with pytest.raises(FieldError) as refused:
        parse_budget("soon")
    assert refused.value.field == "budget"


def test_the_profile_s_own_launch_is_planned_as_written_and_only_candidates_derive() -> None:
    # every speedup is a ratio against the hand-written launch: deriving its graph sizes from the
    # plan would measure a launch nobody wrote
    from deploytool.memory.cards import card_from_table
    from deploytool.tune.prune import plan_candidates

    profile = ProfileStore().get("h200-qwen3.6-35b-a3b-fp8")
    own = dict(profile.server.args)
    space = TuneSpace(
        flags={"max-running-requests": [own.get("max-running-requests", 64), 96]},
        derived=["cuda-graph-max-bs"],
    )
    planned, note = plan_candidates(profile, candidates(profile, space), space, card_from_table("h200"))
    assert note is None
    by_id = {p.candidate.id: p for p in planned}
    assert by_id["base"].candidate.derived == {} and by_id["base"].candidate.args == own
    c01 = by_id["c01"]
    assert c01.pruned is None and c01.candidate.derived == {"cuda-graph-max-bs": c01.running_limit}


def test_a_visit_is_estimated_by_its_whole_wall_time_not_start_plus_passes() -> None:
    # Figures of a real hybrid search on an H200: a start of 80 s and three passes of 9.6 s took
    # a visit of about 128 s once SGLang had shut down; the 20 s beyond start and passes is what
    # let a budget admit a visit the call could not finish.
    s = _search(["base", "c01", "c02"], rounds=1)
    for cid in ("base", "c01"):
        _measure(s.by_id(cid), 3300.0, 3400.0, 3500.0)
        r = s.by_id(cid)
        r.starts[-1].startup_s = 80.0
        for p in r.passes:
            p.measure_s = 9.6
    # journalled before visits were timed whole: start plus passes, as before
    assert estimate_s(s) == pytest.approx(80.0 + 3 * 9.6)
    for cid in ("base", "c01"):
        s.by_id(cid).starts[-1].visit_s = 128.0
    assert estimate_s(s) == pytest.approx(128.0)  # one visit (c02) left, at the measured wall time


def test_a_server_of_another_release_than_the_profile_pins_is_said() -> None:
    measured = _result("base")
    _measure(measured, 100.0)
    measured.passes[0].reported = {"kv_tokens": 10, "running_limit": 2, "runtime_version": "0.5.19"}
    header = {"recipe": "sglang", "runtime_version": "0.5.17"}
    note = runtime_note(header, [measured, _result("c01")])  # c01: never measured, no version
    assert note is not None and "SGLang 0.5.19" in note and "pins 0.5.17" in note and "0.5.17's rules" in note
    measured.passes[0].reported["runtime_version"] = "0.5.17"
    assert runtime_note(header, [measured]) is None
    assert runtime_note({**header, "recipe": "sim"}, [measured]) is None


def test_the_frontier_holds_only_points_inside_the_slo_and_labels_do_not_collide() -> None:
    from deploytool.tune.report import frontier, frontier_points, place_labels, slo_user_tps

    fast_but_late, slow_inside = _result("c01"), _result("c02")
    # c01's level is faster on both axes but misses the SLO in every pass: no frontier point
    for r, tps, meets in ((fast_but_late, 900.0, False), (slow_inside, 400.0, True)):
        point = LoadPoint(8, tps, 60.0, 1, 2, 3, 4, 8, 0, 1.0, 0.5 if meets else 3.0)
        r.starts.append(Start(visit=0, startup_s=1.0))
        r.passes += [Pass(r.id, 0, i, [point], tps if meets else None) for i in range(2)]
    points = frontier_points([fast_but_late, slow_inside])
    assert [(p[0], p[4]) for p in points] == [("c01", False), ("c02", True)]
    assert [p[0] for p in frontier(points)] == ["c02"]
    assert slo_user_tps(parse_slo("min_user_tps=20,tpot_p99_ms=40")) == 25.0
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 10)
    fig.canvas.draw()
    boxes = place_labels(ax, [(f"c{n:02d} c8", 5.0, 5.0) for n in range(4)])  # four labels on one spot
    plt.close(fig)
    assert len(boxes) == 4
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])


def test_a_ctrl_c_during_a_measurement_is_never_absorbed() -> None:
    # asyncio.run turns Ctrl-C into a cancellation; a request path that absorbs it let the run
    # finish normally, and the search went on after the user's Ctrl-C
    import asyncio
    import os
    import signal
    import threading

    from deploytool.tune.measure import run_interruptible

    async def absorbs() -> str:
        for _ in range(40):
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0.05)
        return "finished"

    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            run_interruptible(absorbs())
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)


def test_a_difference_the_noise_resolves_but_inside_the_margin_is_a_tie_not_a_slower_one() -> None:
    # on a quiet machine the reference runtime's passes agree to 0.1%: 0.2% apart is resolved by
    # the interval, and still no reason to change a launch
    s = _search(["base", "c01"], rounds=2, start_noise=0.0)
    for r, base in ((s.by_id("base"), 101.4), (s.by_id("c01"), 101.6)):
        for _ in range(2):
            _measure(r, base, base + 0.05, base - 0.05, base)
    winner, ties = decide(s)
    assert winner.id == "c01" and [t.id for t in ties] == ["base"] and "equal within 2%" in ties[0].why


def test_the_prediction_follows_the_plan_s_running_limit_and_bends_with_the_roofline() -> None:
    import dataclasses

    from deploytool.memory.cards import card_from_table
    from deploytool.tune.predict import predicted
    from deploytool.tune.prune import plan_candidates

    profile = ProfileStore().get("h200-qwen3.6-35b-a3b-fp8")
    space = TuneSpace(
        flags={"max-running-requests": [512]},
        derived=["cuda-graph-max-bs"],
        load=[512],
        prompt_tokens=4096,
        output_tokens=4096,
    )
    planned, _ = plan_candidates(profile, candidates(profile, space), space, card_from_table("h200"))
    high = next(p for p in planned if p.candidate.id == "c01")
    # the plan, not the flag, says how many run: the pool holds fewer than 512 of these
    assert high.pruned is None and high.running_limit < 512
    assert high.weights_gib and high.kv_bytes_per_token  # the plan's bytes a decode step reads
    low = dataclasses.replace(high, running_limit=16)
    ratio = predicted(high, space) / predicted(low, space)
    # more requests a step, less than as much more speed: each one's KV read grows the step
    assert 1.0 < ratio < high.running_limit / 16


def test_a_rival_no_allowed_start_could_decide_is_a_tie_at_once_not_two_more_starts() -> None:
    # passes 6% apart on one server, a 2% gap: even at `rounds` (3) starts of `max_passes` (6)
    # passes each, with restarts adding nothing, the ratio's interval would straddle both 1 and
    # the 2% margin; another start of the profile's own launch could only cost minutes
    s = _search(["base", "c01"])
    _measure(s.by_id("base"), 100, 110, 92, 104)
    _measure(s.by_id("c01"), 104, 112, 95, 106)
    assert next_visit(s) == "c01"  # the leader's second start still comes first
    _measure(s.by_id("c01"), 103, 111, 94, 105)
    assert next_visit(s) is None
    winner, ties = decide(s)
    assert winner.id == "c01" and [t.id for t in ties] == ["base"]
    assert "nor could be within the race's starts" in ties[0].why
    # the same noise and an 8% gap: more starts could tell the two apart, so the race goes on
    s = _search(["base", "c01"])
    _measure(s.by_id("base"), 100, 110, 92, 104)
    _measure(s.by_id("c01"), 108, 118, 100, 112)
    _measure(s.by_id("c01"), 107, 117, 99, 111)
    assert next_visit(s) == "base"


def test_a_request_says_which_field_it_cannot_use() -> None:
    from deploytool.host.slots import Slot
    from deploytool.tune.request import TuneRequest

    for kwargs, field in (
        ({"local": True, "slot": Slot(cpu_name="a")}, "local"),
        ({}, "local"),
        ({"slot": Slot(cpu_name="a"), "port_range": (30100, 30199)}, "port_range"),
        ({"local": True, "resume": True}, "resume"),
        ({"local": True, "budget": 0.0}, "budget"),
    ):
        with pytest.raises(FieldError) as refused:
            TuneRequest("sim", **kwargs)
        assert refused.value.field == field, kwargs
    # a dry run starts nothing: it needs no place
    assert TuneRequest("sim", dry_run=True).where == "nowhere (--dry-run)"
    assert TuneRequest("sim", slot=Slot(cpu_name="a")).where == "--cpu-slot a"
