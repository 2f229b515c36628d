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
from deploytool.memory.request import PlanMemoryRequest
from deploytool.memory.what_if import PLANNER_FLAGS
from deploytool.profiles import ProfileStore
from deploytool.server import serverfields

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "gpu-check"))
import drive

REAL = Path(__file__).parent / "data" / "sglang-real"
PROFILES = Path(__file__).parents[1] / "scripts" / "gpu-check" / "profiles"
DRAFT_SHARE = "0002-draft-shares-embed-and-head-before-pool.patch"  # images/sglang/patches/0.5.17/

# recorded start -> (harness profile, model folder, --patches): the plan the harness records on
# the card is the plan checked here.
STARTS = {
    name: (
        drive.PLANS[name]["profile"],
        drive.PLANS[name]["model"],
        DRAFT_SHARE if drive.PLANS[name].get("patch") else None,
    )
    for name in ("dense", "hybrid-mtp", "a3b", "a3b-patched")
}
# Flags a recorded start was given as `auto` and the profile now names as that start resolved
# them: 0.5.17 resolves the hybrid's state strategy to no_buffer, its architecture
# (Qwen3_5MoeForCausalLM) not being in that release's extra-buffer list (arg_groups/overrides.py
# `_MAMBA_EXTRA_BUFFER_ARCHS`, `_mamba_radix_cache_resolution`).
RESOLVED_FROM_AUTO = {("hybrid-mtp", "mamba-radix-cache-strategy"): "no_buffer"}
# Flags 0.5.17 reports in another spelling than the one it was given: NEXTN runs as EAGLE and
# qwen25 is its tool parser's other name for qwen.
REPORTED_AS = {"speculative-algorithm": {"NEXTN": "EAGLE"}, "tool-call-parser": {"qwen25": "qwen"}}


def server_info(start: str) -> dict:
    return json.loads(json.loads((REAL / start / "server_info.json").read_text())["body"])


def planned(start: str):
    profile, model, patches = STARTS[start]
    plan = plan_memory_command(
        PlanMemoryRequest.from_options(
            profile,
            card="h200",
            checkpoint=REAL / "models" / model,
            profiles_dirs=[PROFILES],
            patches=patches,
        )
    )
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
        if info[field] == "auto" and RESOLVED_FROM_AUTO.get((start, flag)) == value:
            compared += 1  # the same launch: the profile names what `auto` resolved to
            continue
        assert value == info[field], (start, flag)
        compared += 1
    assert compared >= 10


def test_the_dense_pool_within_five_hundredths_of_a_percent() -> None:
    # its weights are a few MiB: allocator noise, so only the pool and the running limit count
    _, record = planned("dense")
    assert record["reported"]["pool_tokens"] == serverfields.kv_pool_tokens(server_info("dense"))
    assert abs(record["error_pct"]["pool_tokens"]) <= 0.05, record["error_pct"]
    assert record["error_pct"]["max_running_requests"] == 0


def test_the_recorded_hybrid_start_sized_its_pool_with_the_drafts_load_free() -> None:
    """The recorded hybrid start is the one of four that sized its pool on 0.48 GiB more than the
    others: as if the draft's whole load (its "mem usage=0.48 GB") were free again at pool
    sizing. Its pool end ("Memory pool end. avail mem=69.38 GB") is the probed starts' with
    0.48 GiB more allocated. The planner plans the other three (next test)."""
    plan, record = planned("hybrid-mtp")
    log = json.loads((REAL / "hybrid-mtp" / "run.json").read_text())["memory_log"]
    assert any("Qwen3_5ForCausalLMMTP, avail mem=137.98 GB, mem usage=0.48 GB" in line for line in log)
    assert any("Memory pool end. avail mem=69.38 GB" in line for line in log)
    assert record["error_pct"]["max_running_requests"] == 0
    assert -0.7 <= record["error_pct"]["pool_tokens"] <= -0.6, record["error_pct"]
    # the budget each start sized on, from its own tokens and slots (_handle_max_mamba_cache:
    # the pool + the intermediate state of 16 + 1 requests x 4 draft tokens + (slots + 1) states)
    per_req = plan.state_bytes_per_request

    def budget(tokens: int, slots: int) -> int:
        return tokens * plan.kv_bytes_per_token + per_req * (16 + 1) * 4 + (slots + 1) * per_req

    info = server_info("hybrid-mtp")["internal_states"][0]
    recorded = budget(info["memory_usage"]["token_capacity"], info["max_mamba_cache_size"])
    probed = budget(28_521_620, 9_257)  # h1 and h2 (docs/measured/h200-preload-probe/)
    lines = _probe_lines("h1")
    # the second load of each point is the draft's
    draft_before = [_free_mib(x) for x in lines if "model_runner.py:1018" in x][1]
    draft_after = [_free_mib(x) for x in lines if "model_runner.py:1100" in x][1]
    assert draft_before - draft_after == pytest.approx(490.0, abs=0.5)  # the draft's load, MiB
    assert (recorded - probed) / 2**20 == pytest.approx(draft_before - draft_after, abs=5)


PROBE = Path(__file__).parents[1] / "docs" / "measured" / "h200-preload-probe"


def _probe_lines(start: str) -> list[str]:
    return (PROBE / f"{start}.memory-lines.log").read_text().splitlines()


def _free_mib(line: str) -> float:
    return float(line.split("free_mib=")[1].split()[0])


def _probed_mib(lines: list[str], where: str) -> float:
    """The free MiB the first probe at `where` (a path:line under sglang/srt) saw."""
    (line,) = [line for line in lines if line.startswith("PROBE") and f" at {where} " in line + " "][:1]
    return _free_mib(line)


@pytest.mark.parametrize("start, recorded", [("h1", "hybrid-mtp"), ("h2", "hybrid-mtp"), ("a", "a3b")])
def test_the_planner_splits_the_memory_before_loading_where_sglang_measures_it(
    start: str, recorded: str
) -> None:
    """Probed in real 0.5.17 schedulers (docs/measured/h200-preload-probe/): pre_model_load_memory
    (bootstrap.py's measure, the slack's base) and the free memory at "Load weight begin" (what
    the pool is cut from), 70 + 32 MiB apart, + 20 MiB of expert map for the 35B."""
    lines = _probe_lines(start)
    plan, _ = planned(recorded)
    pre = _probed_mib(lines, "distributed/bootstrap.py:108")
    begin = _probed_mib(lines, "model_executor/model_runner.py:1018")  # "Load weight begin"
    assert plan.pre_model_load_gib * 1024 == pytest.approx(pre, abs=6)
    assert plan.free_before_load_gib * 1024 == pytest.approx(begin, abs=6)
    assert pre - begin == pytest.approx((102 + (20 if recorded == "a3b" else 0)), abs=1)


def test_the_probed_hybrid_starts_pool_within_five_hundredths_of_a_percent() -> None:
    plan, _ = planned("hybrid-mtp")
    for start in ("h1", "h2"):
        (kv,) = [line for line in _probe_lines(start) if line.startswith("KV Cache is allocated")][:1]
        (mamba,) = [line for line in _probe_lines(start) if line.startswith("Mamba Cache is allocated")]
        tokens = int(kv.split("#tokens: ")[1].split(",")[0])
        slots = int(mamba.split("max_mamba_cache_size: ")[1].split(",")[0])
        assert tokens == 28_521_620  # the 2026-12-02 rerun's too (docs/measured/gpu-check-h200.md)
        assert abs(plan.pool_tokens - tokens) / tokens <= 0.0005, (plan.pool_tokens, tokens)
        assert abs(plan.state_slots - slots) / slots <= 0.0005, (plan.state_slots, slots)
        assert plan.max_running_requests == 16


@pytest.mark.parametrize("start", ["a3b", "a3b-patched"])
def test_every_figure_of_the_35b_a3b_shape_within_a_tenth_of_a_percent(start: str) -> None:
    plan, record = planned(start)
    assert set(record["error_pct"]) == {"weights_gib", "kv_pool_gib", "pool_tokens", "max_running_requests"}
    for figure, error in record["error_pct"].items():
        assert abs(error) <= 0.1, (start, figure, error, record["predicted"], record["reported"])
    assert record["predicted"]["max_running_requests"] == record["reported"]["max_running_requests"]
    assert plan.state_slots == server_info(start)["internal_states"][0]["max_mamba_cache_size"]


def test_the_patch_moves_the_pool_by_what_the_planner_predicts() -> None:
    (stock, a), (shared, b) = planned("a3b"), planned("a3b-patched")
    measured = b["reported"]["pool_tokens"] - a["reported"]["pool_tokens"]
    assert measured == 83_248
    assert shared.pool_tokens - stock.pool_tokens == measured
    # the target's weights do not move; the draft's private embedding and head leave the budget
    assert (
        a["reported"]["weights_gib"] == b["reported"]["weights_gib"]
        and stock.weights_gib == shared.weights_gib
    )
    assert stock.draft_weights_gib - shared.draft_weights_gib == pytest.approx(
        248_320 * 2048 * 2 * 2 / 2**30, abs=0.01
    )


TUNED = Path(__file__).parents[1] / "docs" / "measured"


@pytest.mark.parametrize(
    "record, model, within_pct",
    [("tune-h200-a3b.json", "qwen36-35b-a3b-shape", 0.1), ("tune-h200.json", "qwen3-tiny", 0.05)],
)
def test_the_tune_runs_candidates_pools(record: str, model: str, within_pct: float) -> None:
    """Every candidate `deploytool tune --local` started on the lent H200: its launch (the
    profile's flags with the candidate's changes and derived flags) replanned, against the pool
    and running limit its server reported. The 35B-A3B candidates span fractions 0.55 and 0.75:
    the slack's base is what makes the gap the same at both."""
    run = json.loads((TUNED / record).read_text())
    checked = 0
    for candidate in run["candidates"]:
        reported = candidate.get("reported") or {}
        if not reported.get("kv_tokens"):
            continue
        flags = {**candidate["changes"], **candidate["derived"]}
        sets = [
            f"{k}={str(v).lower() if isinstance(v, bool) else v}"
            for k, v in flags.items()
            if k in PLANNER_FLAGS
        ]  # e.g. num-continuous-decode-steps: no memory
        plan = plan_memory_command(
            PlanMemoryRequest.from_options(
                run["profile"],
                card="h200",
                sets=sets,
                checkpoint=REAL / "models" / model,
                profiles_dirs=[PROFILES],
                patches="none",
            )
        )
        error = (plan.pool_tokens - reported["kv_tokens"]) / reported["kv_tokens"] * 100
        assert abs(error) <= within_pct, (candidate["id"], plan.pool_tokens, reported)
        assert plan.max_running_requests == reported["running_limit"], candidate["id"]
        checked += 1
    assert checked >= 5
