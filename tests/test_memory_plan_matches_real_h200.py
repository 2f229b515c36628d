"""The memory planner against real SGLang 0.5.17 starts on an H200, the GPU harness's recordings
(tests/data/sglang-real/; the measured record: docs/measured/gpu-check-h200.md and
docs/measured/h200-draft-share/README.md). Each start is planned from the harness profile that
launched it (scripts/gpu-check/profiles/) and the folder it served (config only, dummy weights),
and the server's own /server_info is replayed through preflight's comparison
(memory/accuracy.py). The 35B-A3B-shaped start ran twice, stock and with the draft-sharing patch
applied to the overlay by hand: the patched start is planned with --patches naming that patch."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from deploytool.memory.accuracy import compare_with_server
from deploytool.memory.profile_plan import plan_memory_command
from deploytool.profiles import ProfileStore
from deploytool.server import serverfields

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "gpu-check"))
import drive  # noqa: E402

REAL = Path(__file__).parent / "data" / "sglang-real"
PROFILES = Path(__file__).parents[1] / "scripts" / "gpu-check" / "profiles"
DRAFT_SHARE = "0002-draft-shares-embed-and-head-before-pool.patch"  # images/sglang/patches/0.5.17/

# recorded start -> (harness profile, model folder, --set what-ifs, --patches). The what-ifs are
# the harness's own (drive.py's `plan_sets`, e.g. the hybrid's state strategy as 0.5.17 resolves
# it), so the plan the harness records on the card is the plan checked here.
STARTS = {name: (drive.PLANS[name]["profile"], drive.PLANS[name]["model"], drive.PLANS[name].get("plan_sets", []),
                 DRAFT_SHARE if drive.PLANS[name].get("patch") else None)
          for name in ("dense", "hybrid-mtp", "a3b", "a3b-patched")}
# Flags 0.5.17 reports in another spelling than the one it was given: NEXTN runs as EAGLE and
# qwen25 is its tool parser's other name for qwen.
REPORTED_AS = {"speculative-algorithm": {"NEXTN": "EAGLE"}, "tool-call-parser": {"qwen25": "qwen"}}


def server_info(start: str) -> dict:
    return json.loads(json.loads((REAL / start / "server_info.json").read_text())["body"])


def planned(start: str):
    profile, model, sets, patches = STARTS[start]
    plan = plan_memory_command(profile, card="h200", sets=sets, checkpoint=REAL / "models" / model,
                               profiles_dirs=[PROFILES], patches=patches)
    return plan, compare_with_server(plan, server_info(start))


@pytest.mark.parametrize("start", list(STARTS))
def test_the_profile_planned_is_the_launch_the_server_ran(start: str) -> None:
    """Every flag of the harness profile that /server_info reports has the value the server ran
    with: a profile edited after the recording would plan another launch than the one measured."""
    args = ProfileStore([PROFILES]).get(STARTS[start][0]).server.args
    info = server_info(start)
    compared = 0
    for flag, value in args.items():
        field = flag.replace("-", "_")
        if field not in info:  # e.g. cuda-graph-max-bs, inside cuda_graph_config in 0.5.17
            continue
        if flag == "default-chat-template-kwargs":
            value = json.loads(value)
        elif flag in REPORTED_AS:
            value = REPORTED_AS[flag].get(value, value)
        assert value == info[field], (start, flag)
        compared += 1
    assert compared >= 10


@pytest.mark.parametrize("start", ["dense", "hybrid-mtp"])
def test_the_tiny_models_pools_within_one_percent(start: str) -> None:
    # their weights are a few MiB: allocator noise, so only the pool and the running limit count
    _, record = planned(start)
    assert record["reported"]["pool_tokens"] == serverfields.kv_pool_tokens(server_info(start))
    assert abs(record["error_pct"]["pool_tokens"]) <= 1.0, record["error_pct"]
    assert record["error_pct"]["max_running_requests"] == 0


@pytest.mark.parametrize("start", ["a3b", "a3b-patched"])
def test_every_figure_of_the_35b_a3b_shape_within_three_percent(start: str) -> None:
    plan, record = planned(start)
    assert set(record["error_pct"]) == {"weights_gib", "kv_pool_gib", "pool_tokens", "max_running_requests"}
    for figure, error in record["error_pct"].items():
        assert abs(error) <= 3.0, (start, figure, error, record["predicted"], record["reported"])
    assert record["predicted"]["max_running_requests"] == record["reported"]["max_running_requests"]
    assert plan.state_slots == server_info(start)["internal_states"][0]["max_mamba_cache_size"]


def test_the_patch_moves_the_pool_by_what_the_planner_predicts() -> None:
    (stock, a), (shared, b) = planned("a3b"), planned("a3b-patched")
    measured = b["reported"]["pool_tokens"] - a["reported"]["pool_tokens"]
    assert measured > 0
    assert abs((shared.pool_tokens - stock.pool_tokens) - measured) / measured <= 0.03
    # the target's weights do not move; the draft's private embedding and head leave the budget
    assert a["reported"]["weights_gib"] == b["reported"]["weights_gib"] and stock.weights_gib == shared.weights_gib
    assert stock.draft_weights_gib - shared.draft_weights_gib == pytest.approx(248_320 * 2048 * 2 * 2 / 2**30, abs=0.01)
