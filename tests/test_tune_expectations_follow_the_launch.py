"""A preflight expectation that restates a launch flag follows a tune candidate's launch: the
GPU harness's 35B profile pins decode CUDA graphs off (to start faster), and a search that turns
them on must qualify its winner against what that launch reports, not the profile's old words.
The written winner carries the moved expectation, and loads through `extends` with the rest kept."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from deploytool.profiles.store import ProfileStore
from deploytool.tune.measure import Pass
from deploytool.tune.prune import Planned
from deploytool.tune.report import winner_profile
from deploytool.tune.results import CandidateResult
from deploytool.tune.space import TuneSpace, candidates

ROOT = Path(__file__).resolve().parent.parent
HARNESS_PROFILES = ROOT / "scripts" / "gpu-check" / "profiles"
A3B = "gpu-check-qwen36-35b-a3b-mtp"


def _expect(profile) -> dict:
    return profile.qualify["preflight"]["expect"]


def _measured(cand) -> CandidateResult:
    return CandidateResult(
        Planned(cand), passes=[Pass(candidate=cand.id, visit=0, repeat=0, points=[], score=100.0)]
    )


def test_turning_graphs_on_moves_the_graph_expectation_and_nothing_else() -> None:
    profile = ProfileStore([HARNESS_PROFILES]).get(A3B)
    assert _expect(profile)["decode_cuda_graph"] is False  # the profile's own words
    space = TuneSpace(flags={"disable-decode-cuda-graph": [True, False], "max-running-requests": [8, 16]})
    by_change = {
        (c.args["disable-decode-cuda-graph"], c.args["max-running-requests"]): c
        for c in candidates(profile, space)
    }

    graphs_on = by_change[(False, 8)]
    assert _expect(graphs_on.profile)["decode_cuda_graph"] is True
    # requirements are not restatements of a flag: they stay as the profile says
    for key in ("min_kv_tokens", "speculative_algorithm", "min_accept_length", "window_requests"):
        assert _expect(graphs_on.profile)[key] == _expect(profile)[key]
    assert graphs_on.profile.qualify["preflight"]["min_running_requests"] == 8
    # a candidate that leaves the graphs as they were leaves the expectation alone
    assert _expect(by_change[(True, 16)].profile)["decode_cuda_graph"] is False
    # the original profile object is not changed by making candidates
    assert _expect(profile)["decode_cuda_graph"] is False


def test_the_written_winner_carries_the_moved_expectation_and_loads_with_the_rest(tmp_path: Path) -> None:
    for f in HARNESS_PROFILES.glob("*.yaml"):
        shutil.copy(f, tmp_path / f.name)
    store = ProfileStore([tmp_path])
    profile = store.get(A3B)
    cands = candidates(
        profile, TuneSpace(flags={"disable-decode-cuda-graph": [False], "max-running-requests": [8, 16]})
    )
    winner = next(c for c in cands if c.args.get("max-running-requests") == 16)

    text = winner_profile(profile, _measured(winner), None, name="a3b-tuned", evidence={})
    body = yaml.safe_load(text)
    assert body["qualify"] == {"preflight": {"expect": {"decode_cuda_graph": True}}}
    (tmp_path / "a3b-tuned.yaml").write_text(text)

    tuned = ProfileStore([tmp_path]).get("a3b-tuned")
    assert tuned.server.args["disable-decode-cuda-graph"] is False
    assert tuned.server.args["max-running-requests"] == 16
    assert _expect(tuned) == {**_expect(profile), "decode_cuda_graph": True}
    assert tuned.qualify["preflight"]["min_running_requests"] == 8
    assert tuned.qualify["suites"] == profile.qualify["suites"]


def test_a_winner_that_moves_no_restated_flag_writes_no_qualify_section(tmp_path: Path) -> None:
    profile = ProfileStore([HARNESS_PROFILES]).get(A3B)
    cands = candidates(profile, TuneSpace(flags={"max-running-requests": [16]}))
    text = winner_profile(profile, _measured(cands[1]), None, name="a3b-tuned", evidence={})
    assert "qualify" not in yaml.safe_load(text)
