"""The memory plan's upper edge on CPU: what a start needs beside the pool (the decode graphs by
batch size, the chunk's activations, an MTP draft's pool), the highest mem-fraction-static that
still starts, the parallel sizes against the plan's cards, and the refusal that names the number
and the fix (docs/memory.md, "The upper edge")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deploytool.edge_rule import decode_capture_sizes, highest_fraction
from deploytool.errors import UsageError
from deploytool.memory.cards import card_from_table
from deploytool.memory.checkpoint import read_checkpoint
from deploytool.memory.inputs import PlanInputs
from deploytool.memory.plan import plan_memory
from deploytool.memory.profile_plan import plan_memory_command
from deploytool.memory.request import PlanMemoryRequest

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "tests" / "data" / "sglang-real" / "models"
PROFILES = ROOT / "scripts" / "gpu-check" / "profiles"
DENSE = "gpu-check-qwen3-tiny"


def dense(*sets: str, card: str = "h200"):
    return plan_memory_command(
        PlanMemoryRequest.from_options(
            DENSE, card=card, checkpoint=MODELS / "qwen3-tiny", profiles_dirs=[PROFILES], sets=list(sets)
        )
    )


def item(plan, start: str) -> dict:
    found = [i for i in plan.beside_pool if i["what"].startswith(start)]
    assert len(found) == 1, plan.beside_pool
    return found[0]


def test_the_issues_launch_above_the_edge_is_refused_with_the_number_and_the_fix() -> None:
    # fraction 0.995 left 0.70 GiB beside the pool; real SGLang 0.5.17 allocated the pool and died
    plan = dense("mem-fraction-static=0.995")
    assert plan.verdict == "error"
    edge = plan.max_mem_fraction_static
    assert edge is not None and 0.9 < edge < 0.995
    [problem] = [p for p in plan.problems if "beside the pool" in p]
    assert f"the highest mem-fraction-static that starts on this card is {edge:.3f}" in problem
    assert "lower mem-fraction-static" in problem and "--cuda-graph-max-bs" in problem
    assert "--chunked-prefill-size" in problem
    # just at the edge it starts (uncalibrated: the chunk's activations are an estimate), just above it does not
    assert dense(f"mem-fraction-static={edge}").fits
    assert dense(f"mem-fraction-static={edge + 0.001:.3f}").verdict == "error"


def test_every_item_says_where_its_figure_comes_from() -> None:
    plan = dense()
    assert plan.beside_pool and all(
        i["source"] in ("SGLang's rule", "measured", "estimate") for i in plan.beside_pool
    )
    assert all(i["where"] for i in plan.beside_pool)
    # the chunk's peak and the allocator's margin have not been measured on a real start: said so
    assert plan.upper_edge["calibrated"] is False
    assert "not measured on a real start: activations of a 8,192-token chunk" in plan.upper_edge["notes"][0]
    assert {i["source"] for i in plan.beside_pool} == {"SGLang's rule", "measured", "estimate"}
    assert plan.upper_edge["needed_gib"] == pytest.approx(sum(i["gib"] for i in plan.beside_pool), abs=0.01)


def test_graph_memory_grows_with_the_captured_batch_sizes_and_lowers_the_edge() -> None:
    # the running limit caps the captured sizes (base_cuda_graph_runner.py), so it is raised with them
    small = dense("cuda-graph-max-bs=8", "max-running-requests=512")
    large = dense("cuda-graph-max-bs=512", "max-running-requests=512")
    g_small, g_large = item(small, "decode CUDA graphs"), item(large, "decode CUDA graphs")
    assert "4 sizes up to 8" in g_small["what"]  # 1, 2, 4, 8
    assert f"{len(decode_capture_sizes(512, speculative=False))} sizes up to 512" in g_large["what"]
    assert g_large["gib"] > 10 * g_small["gib"]
    assert large.max_mem_fraction_static < small.max_mem_fraction_static


def test_the_graphs_never_exceed_the_running_limit() -> None:
    capped = dense("cuda-graph-max-bs=512", "max-running-requests=16")
    assert "up to 16" in item(capped, "decode CUDA graphs")["what"]
    assert not [i for i in dense("disable-cuda-graph=true").beside_pool if "CUDA graphs" in i["what"]]


def test_sglangs_capture_lists() -> None:
    """server_args.py `_generate_decode_cuda_graph_batch_sizes` (0.5.17, 0.5.23), as the
    recorded starts logged them (tests/data/sglang-real/*/run.json: bs=[...])."""
    assert decode_capture_sizes(16, speculative=False) == [1, 2, 4, 8, 12, 16]
    assert decode_capture_sizes(16, speculative=True) == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16]
    assert decode_capture_sizes(20, speculative=False)[-2:] == [16, 20]
    assert decode_capture_sizes(512, speculative=False)[-3:] == [480, 496, 512]


def test_chunk_activations_scale_with_the_chunk() -> None:
    a = item(dense("chunked-prefill-size=2048"), "activations of a 2,048-token chunk")
    b = item(dense("chunked-prefill-size=16384"), "activations of a 16,384-token chunk")
    assert b["gib"] == pytest.approx(8 * a["gib"], rel=0.02)
    # without the flag SGLang picks the chunk by the card: 8192 on an H200 (memory_hook.py)
    item(dense(), "activations of a 8,192-token chunk")
    assert (
        dense("chunked-prefill-size=16384").max_mem_fraction_static
        <= dense("chunked-prefill-size=2048").max_mem_fraction_static
    )


def test_an_mtp_drafts_pool_beside_the_pool_grows_with_the_fraction() -> None:
    plan = plan_memory_command(
        PlanMemoryRequest.from_options(
            "gpu-check-qwen36-tiny-mtp",
            card="h200",
            checkpoint=MODELS / "qwen36-tiny",
            profiles_dirs=[PROFILES],
        )
    )
    draft = item(plan, "the MTP draft's KV pool")
    assert draft["source"] == "SGLang's rule" and draft["gib"] > 0
    assert item(plan, "CUDA graphs: target verify, draft decode, draft extend")["gib"] > 0
    higher = plan_memory_command(
        PlanMemoryRequest.from_options(
            "gpu-check-qwen36-tiny-mtp",
            card="h200",
            checkpoint=MODELS / "qwen36-tiny",
            profiles_dirs=[PROFILES],
            sets=["mem-fraction-static=0.8"],
        )
    )
    assert item(higher, "the MTP draft's KV pool")["gib"] > draft["gib"]


def test_highest_fraction_is_the_last_one_on_sglangs_grid_that_leaves_room() -> None:
    assert highest_fraction(lambda f: 100 * (1 - f) - 5) == 0.95
    assert highest_fraction(lambda f: -1) is None
    assert highest_fraction(lambda f: 1) == 0.999


@pytest.mark.parametrize(
    ("sets", "card", "words"),
    [
        (
            ["tp-size=2"],
            "h200",
            "tp-size 2 x pp-size 1 x dp-size 1 = 2 GPUs, and the plan has 1 x NVIDIA H200",
        ),
        (["tp-size=2", "dp-size=2"], "h200:2", "= 4 GPUs, and the plan has 2 x NVIDIA H200"),
        (["tp-size=2", "pp-size=2"], "h200:3", "tp-size 2 x pp-size 2 x dp-size 1 = 4 GPUs"),
        (["tp-size=4", "ep-size=3"], "h200:4", "ep-size 3 must divide tp-size 4"),
        (
            ["tp-size=2", "dp-size=4", "enable-dp-attention=true"],
            "h200:2",
            "dp-size 4 with --enable-dp-attention",
        ),
    ],
)
def test_parallel_sizes_beyond_the_plans_cards_are_refused(sets: list[str], card: str, words: str) -> None:
    plan = dense(*sets, card=card)
    assert plan.verdict == "error"
    assert any(words in p for p in plan.problems), plan.problems


@pytest.mark.parametrize(
    ("sets", "card"),
    [
        (["tp-size=2"], "h200:2"),
        (["tp-size=2", "dp-size=2", "enable-dp-attention=true"], "h200:2"),
        (["tp-size=4", "ep-size=4"], "h200:4"),
        (["tp-size=2", "dp-size=2"], "h200:4"),
    ],
)
def test_parallel_sizes_the_cards_hold_are_planned(sets: list[str], card: str) -> None:
    plan = dense(*sets, card=card)
    assert not [p for p in plan.problems if "GPUs, and the plan has" in p or "must divide" in p], (
        plan.problems
    )


def test_a_card_count_that_is_not_a_number_is_refused() -> None:
    with pytest.raises(UsageError, match="NAME:COUNT"):
        dense(card="h200:two")


def test_several_cards_are_uncalibrated_above_the_fraction_that_holds_twice_the_estimates() -> None:
    """NCCL's buffers (SGLang's own allowance, an estimate) were not measured: between the
    fraction that holds every estimate twice and the estimate's own edge the plan says
    "uncalibrated", not "fits", and `fits` (what up and tune act on) stays true."""
    base = dense("tp-size=2", card="h200:2")
    edge = base.upper_edge
    assert edge["calibrated"] is False and edge["sure_fraction"] < edge["max_fraction"]
    assert any(i["source"] == "estimate" and "NCCL" in i["what"] for i in base.beside_pool)
    middle = round((edge["sure_fraction"] + edge["max_fraction"]) / 2, 3)
    plan = dense("tp-size=2", f"mem-fraction-static={middle}", card="h200:2")
    assert plan.verdict == "uncalibrated" and plan.fits
    assert any(w.startswith("uncalibrated:") for w in plan.warnings)


def test_a_card_other_than_the_measured_one_is_uncalibrated_near_its_edge() -> None:
    plan = dense(card="rtx5090")
    assert plan.upper_edge["calibrated"] is False
    assert "measured on an H200" in plan.upper_edge["notes"][0]


def test_the_plan_json_carries_the_edge(tmp_path: Path) -> None:
    plan = dense("mem-fraction-static=0.995")
    data = json.loads(json.dumps(plan.as_dict()))
    assert data["max_mem_fraction_static"] == plan.max_mem_fraction_static
    assert data["upper_edge"]["items"] and data["verdict"] == "error"


def test_plan_memory_replans_each_fraction_without_recursing() -> None:
    shape = read_checkpoint(MODELS / "qwen3-tiny")
    plan = plan_memory(
        shape, card_from_table("h200"), PlanInputs(context_length=32768, mem_fraction_static=0.5)
    )
    assert plan.max_mem_fraction_static is not None
    bare = plan_memory(
        shape, card_from_table("h200"), PlanInputs(context_length=32768, mem_fraction_static=0.5), edge=False
    )
    assert bare.beside_pool == [] and bare.pool_tokens == plan.pool_tokens


def test_the_slot_of_a_described_host_is_the_plans_cards() -> None:
    """--gpu UUID,UUID on a described host (the NVML stand-in): two cards hold tp-size 2, one
    does not."""
    from conftest import run_cli

    host = ROOT / "tests" / "data" / "nvml-hosts" / "h200x2-pcie-switch.yaml"
    first, second = "GPU-a2000001-4b3a-4c2d-9e1f-000000000001", "GPU-a2000002-4b3a-4c2d-9e1f-000000000002"
    env = {"DEPLOYTOOL_NVML_STANDIN": str(host)}
    one = run_cli(
        "plan-memory",
        "--profile",
        "h200-qwen3.6-35b-a3b-fp8",
        "--gpu",
        first,
        "--set",
        "tp-size=2",
        "--json",
        env=env,
    )
    assert one.returncode == 1
    assert any(
        "= 2 GPUs, and the plan has 1 x NVIDIA H200 NVL (nvml)" in p
        for p in json.loads(one.stdout)["problems"]
    )
    two = run_cli(
        "plan-memory",
        "--profile",
        "h200-qwen3.6-35b-a3b-fp8",
        "--gpu",
        f"{first},{second}",
        "--set",
        "tp-size=2",
        "--json",
        env=env,
    )
    assert two.returncode == 0, two.stdout
    assert json.loads(two.stdout)["gpus"] == 2


def test_an_mtp_drafts_pool_too_big_for_the_rest_is_refused_once_by_the_edge() -> None:
    """One rule holds what a start allocates beside the pool: the MTP draft's pool is one of its
    items (with the graphs, the workspace, the chunk), not a second check of its own."""
    plan = plan_memory_command(
        PlanMemoryRequest.from_options(
            "h200-qwen3.6-35b-a3b-fp8",
            checkpoint=ROOT / "tests" / "data" / "models" / "qwen3.6-35b-a3b-fp8",
            sets=["mem-fraction-static=0.97"],
        )
    )
    assert plan.draft_kv_outside_pool_gib > plan.slack_gib  # the draft's pool alone is over the rest
    [problem] = plan.problems
    assert problem.startswith("mem-fraction-static 0.97 leaves too little beside the pool")
    assert (
        f"the MTP draft's KV pool (allocated after the pool) {plan.draft_kv_outside_pool_gib:.2f} GiB"
        in problem
    )
    assert plan.max_mem_fraction_static is not None and plan.max_mem_fraction_static < 0.97
