"""tune's schedule and verdicts, on measured figures given by hand: a quick round for all, then
successive halving in reversed (interleaved) order among the candidates whose spread still meets
the leader's; overlapping ranges are a tie; a failed start is out; the space's parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploytool.errors import UsageError
from deploytool.profiles import ProfileStore
from deploytool.tune.measure import LoadPoint, Pass
from deploytool.tune.prune import Planned
from deploytool.tune.results import CandidateResult, Start, decide, overlaps
from deploytool.tune.run import runtime_note
from deploytool.tune.search import Search, estimate_s, next_visit
from deploytool.tune.space import Candidate, TuneSpace, candidates, parse_budget, parse_slo, recipe_defaults


def _profile():
    return ProfileStore().get("sim")


def _result(cid: str) -> CandidateResult:
    return CandidateResult(planned=Planned(Candidate(cid, {}, _profile())))


def _measure(r: CandidateResult, *scores: float | None) -> None:
    visit = len(r.starts)
    r.starts.append(Start(visit=visit, startup_s=1.0))
    for i, s in enumerate(scores):
        point = LoadPoint(8, s, 10.0, 1, 2, 3, 4, 8, 0, 1.0 if s else 0.0, 0.5 if s else 2.0)
        r.passes.append(Pass(r.id, visit, i, [point], s))


def _search(ids: list[str], rounds: int = 3) -> Search:
    s = Search(_profile(), TuneSpace(flags={"x": [1]}, rounds=rounds), parse_slo(None, TuneSpace()), Path("/nonexistent"))
    s.results = [_result(i) for i in ids]
    return s


def test_round_one_visits_all_then_only_contenders_in_reverse_order() -> None:
    s = _search(["base", "c01", "c02", "c03"])
    order = []
    for _ in range(4):
        cid = next_visit(s)
        order.append(cid)
        _measure(s.by_id(cid), *{"base": (100, 104), "c01": (200, 210), "c02": (195, 205), "c03": (50, 52)}[cid])
    assert order == ["base", "c01", "c02", "c03"]
    # c01 leads; c02's range meets it; base and c03 cannot catch up: round two, reversed
    assert next_visit(s) == "c02"
    _measure(s.by_id("c02"), 196, 204)
    assert next_visit(s) == "c01"
    _measure(s.by_id("c01"), 201, 209)
    # round three: the reverse of round two again (A B B A)
    assert next_visit(s) == "c01"


def test_a_clear_leader_ends_the_search_after_one_round() -> None:
    s = _search(["base", "c01"])
    _measure(s.by_id("base"), 100, 101)
    _measure(s.by_id("c01"), 400, 402)
    assert next_visit(s) is None
    winner, ties = decide(s.results)
    assert winner is not None and winner.id == "c01" and ties == []
    assert s.by_id("base").verdict == "slower"


def test_overlapping_ranges_are_a_tie_and_a_margin_widens_them() -> None:
    assert overlaps((100, 110), (105, 120))
    assert not overlaps((100, 101), (102, 103))
    assert overlaps((100, 101), (102, 103), margin=0.02)
    s = _search(["base", "c01", "c02"])
    _measure(s.by_id("base"), 100, 110)
    _measure(s.by_id("c01"), 105, 112)
    _measure(s.by_id("c02"), 50, 55)
    winner, ties = decide(s.results)
    assert winner.id == "c01" and [t.id for t in ties] == ["base"]
    assert {r.id: r.verdict for r in s.results} == {"base": "tie", "c01": "winner", "c02": "slower"}


def test_failed_starts_and_slo_misses_are_never_winners() -> None:
    s = _search(["base", "c01", "c02"])
    s.by_id("c01").starts.append(Start(visit=0, startup_s=5.0, error="the server exited with status 1"))
    _measure(s.by_id("base"), None, None)
    _measure(s.by_id("c02"), None)
    assert next_visit(s) is None
    winner, _ = decide(s.results)
    assert winner is None
    assert s.by_id("c01").verdict == "failed to start"
    assert s.by_id("base").verdict == "no point inside the SLO"


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
    slo = parse_slo("ttft_p99_ms=2000, min_user_tps=20", TuneSpace())
    assert (slo.ttft_p99_ms, slo.tpot_p99_ms, slo.min_user_tps) == (2000, None, 20)
    for bad in ("ttft=1", "ttft_p99_ms=fast", "tpot_p99_ms=-1"):
        with pytest.raises(UsageError):
            parse_slo(bad, TuneSpace())
    assert parse_budget("90m") == 5400 and parse_budget("2h") == 7200 and parse_budget("600") == 600
    with pytest.raises(UsageError):
        parse_budget("soon")


def test_the_profile_s_own_launch_is_planned_as_written_and_only_candidates_derive() -> None:
    # every speedup is a ratio against the hand-written launch: deriving its graph sizes from the
    # plan would measure a launch nobody wrote
    from deploytool.memory.cards import card_from_table
    from deploytool.tune.prune import plan_candidates

    profile = ProfileStore().get("h200-qwen3.6-35b-a3b-fp8")
    own = dict(profile.server.args)
    space = TuneSpace(flags={"max-running-requests": [own.get("max-running-requests", 64), 96]},
                      derived=["cuda-graph-max-bs"])
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
