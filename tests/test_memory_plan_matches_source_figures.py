"""The planner held against figures measured on a real RTX 5090 with this very checkpoint.

The source (the source document, "Where we started" and "Buying back
memory") ran nvidia/Qwen3.6-35B-A3B-NVFP4 on one RTX 5090 with stock SGLang 0.5.22 and reports:
  - the checkpoint "Loaded, it's about 21 GB";
  - stock, no MTP: a KV pool of 345K tokens, 9 requests fit;
  - stock + MTP: 181K tokens, 1 request (the draft's private ~2 GB vocabulary copies included);
  - mem-fraction-static 0.88 (0.90 failed a stress test).
and then bought the memory back: 244K tokens and 3 requests with the draft sharing the target's
embedding and head, 303K and 8 with the state in bf16, ReplaySSM and pinned slots, 358K and 8
with an FP8 draft (the steps at the end of this file).
The stock launches are rebuilt here as what-ifs of the shipped profile on stock wheels
(`--patches none`), as a user would type them (`--set`), with SGLang's own defaults for what the source did not set: the checkpoint's
float32 Gated-DeltaNet state (no --mamba-ssm-dtype), and with MTP the draft shape SGLang picks
for this architecture (arg_groups/speculative_hook.py `_auto_choose_speculative_params`: 3 steps,
top-k 1, 4 draft tokens) and the running-request cap it sets for speculative decoding
(`_handle_eagle_family`: 48).

Tolerance: the pool within 10% of the source's figure and the running requests exact. The
source rounds its pools to 1K tokens and reports a 0.5.22 server; the planner follows 0.5.23's
accounting (held within 0.1% against real 0.5.17 servers on an H200, docs/memory.md) and a
checkpoint size read off the hub's listing to 0.1 GB (tests/data/models/README.md). Measured
(this file's plans):
  stock         353,171 tokens vs 345K  (+2.4%),  9 requests vs 9
  stock + MTP   190,765 tokens vs 181K  (+5.4%),  1 request vs 1
Both only with an FP8 KV cache: with the bf16 cache the test checkpoint's config implies, the
planner is 47% and 55% short, and no bf16 reading of SGLang's split between state and KV gives
345K tokens with 9 requests (see the last tests). So the source's server ran an FP8 KV cache: the
checkpoint's hf_quant_config.json saying kv_cache_quant_algo FP8 (which makes `auto` FP8,
mem_cache/kv_cache_dtype.py) or --kv-cache-dtype fp8_e4m3.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from deploytool.memory.checkpoint import read_checkpoint
from deploytool.memory.default_fraction import prefill_graph_sizes, sglang_default_mem_fraction_static
from deploytool.memory.profile_plan import plan_memory_command
from deploytool.memory.request import PlanMemoryRequest

CHECKPOINT = Path(__file__).parent / "data" / "models" / "qwen3.6-35b-a3b-nvfp4"
PROFILE = "rtx5090-qwen3.6-35b-a3b-nvfp4"
GIB = 1 << 30

# The profile's own launch, undone where stock SGLang did not have it (the state flags, the
# KV dtype: `auto`, which the test checkpoint's config makes bf16).
UNDONE = [
    "mamba-ssm-dtype=",
    "enable-linear-replayssm-spec=",
    "max-mamba-cache-size=",
    "kv-cache-dtype=",
    "speculative-moe-runner-backend=",
]
STOCK = [
    "speculative-algorithm=",
    "speculative-num-steps=",
    "speculative-eagle-topk=",
    "speculative-num-draft-tokens=",
    "max-running-requests=",
    *UNDONE,
]
STOCK_MTP = [
    "speculative-num-steps=3",
    "speculative-eagle-topk=1",
    "speculative-num-draft-tokens=4",
    "max-running-requests=48",
    *UNDONE,
]
FP8_KV = ["kv-cache-dtype=fp8_e4m3"]

SOURCE = {"stock": (345_000, 9), "stock+mtp": (181_000, 1)}
POOL_TOLERANCE = 0.10


def _plan(sets: list[str], patches: str = "none"):
    """A launch of the profile on stock SGLang (`--patches none`), or with the patches named."""
    return plan_memory_command(
        PlanMemoryRequest.from_options(PROFILE, sets=sets, checkpoint=CHECKPOINT, patches=patches)
    )


def _error(predicted: int, measured: int) -> float:
    return (predicted - measured) / measured


@pytest.mark.parametrize("name, sets", [("stock", STOCK), ("stock+mtp", STOCK_MTP)])
def test_stock_launches_predict_the_sources_pool_and_requests(name: str, sets: list[str]) -> None:
    tokens, requests = SOURCE[name]
    plan = _plan(sets + FP8_KV)
    assert plan.mem_fraction_static == 0.88 and plan.kv_cache_dtype == "fp8_e4m3"
    assert abs(_error(plan.pool_tokens, tokens)) <= POOL_TOLERANCE, (name, plan.pool_tokens, tokens)
    assert plan.max_running_requests == requests, (name, plan.max_running_requests)


def test_mtp_costs_what_the_source_measured_in_pool_and_requests() -> None:
    """The step from stock to stock + MTP: the source lost 164K tokens (48%) and 8 requests."""
    plain, mtp = _plan(STOCK + FP8_KV), _plan(STOCK_MTP + FP8_KV)
    lost = 1 - mtp.pool_tokens / plain.pool_tokens
    assert abs(lost - (1 - 181 / 345)) <= 0.05  # measured: 0.46 against the source's 0.48
    assert mtp.max_running_requests < plain.max_running_requests
    # the target is the same; the draft adds the MTP layer (on disk, loaded only as the draft)
    # and its private bf16 vocabulary
    assert mtp.weights_gib == plain.weights_gib and plain.draft_weights_gib == 0
    assert mtp.draft_weights_gib * GIB == pytest.approx(1_689_255_936 + 2 * 248_320 * 2048 * 2, rel=1e-3)


def test_loaded_weights_match_the_sources_about_21_gb() -> None:
    """Without speculative decoding SGLang skips the mtp.* tensors (models/qwen3_5.py
    load_weights), so the GPU holds total_size less the MTP layer: 23.5e9 - 1.69e9 bytes."""
    plan = _plan(STOCK)
    shape = read_checkpoint(CHECKPOINT)
    # one MTP layer, bf16 (the quantization excludes mtp*): q with its output gate, k, v, o;
    # 256 experts and the shared expert (gate, up, down) with the router; fc joining 2 x hidden
    params = (
        (16 * 256 * 2 + 2 * 2 * 256 + 16 * 256) * 2048
        + (256 * 3 * 512 + 3 * 512 + 256) * 2048
        + 2 * 2048 * 2048
    )
    assert shape.draft_precision == "bf16" and shape.draft_layer_bytes() == params * 2
    rope = 262_144 * 64 * 4  # SGLang's rotary cos/sin table, fp32, built with the model
    assert plan.weights_gib == round((23_500_000_000 - params * 2 + rope) / GIB, 2)
    # "about 21 GB": SGLang logs GiB as "GB"; 20.3 GiB is 21.8e9 bytes, either reading within 5%
    assert abs(plan.weights_gib - 21) / 21 <= 0.05


def test_a_bf16_kv_cache_cannot_give_the_sources_stock_figures() -> None:
    """The checkpoint config here says kv_cache_quant_algo null (bf16): the planner then falls
    far short, and no bf16 budget gives 345K tokens with only 9 requests, because SGLang's
    auto-sized state takes 0.9/1.9 of the budget (kv_cache_configurator.py
    `_handle_max_mamba_cache`): 345K bf16 tokens are 6.6 GiB of KV, which leaves 5.9 GiB of
    state beside them, 97 slots of 61.4 MiB, 19 requests."""
    for sets, (tokens, _requests) in ((STOCK, SOURCE["stock"]), (STOCK_MTP, SOURCE["stock+mtp"])):
        plan = _plan(sets)
        assert plan.kv_cache_dtype == "bf16"
        assert _error(plan.pool_tokens, tokens) < -0.40
    kv = 345_000 * 20_480 / GIB
    state = kv * 0.9  # the state budget is 0.9 x the KV's share
    assert int(state * GIB // 64_389_120) // 5 >= 15


def test_sglangs_default_mem_fraction_on_a_5090_is_not_what_the_source_ran() -> None:
    """arg_groups/memory_hook.py on a 32,607 MiB card: chunked prefill 4096, decode graphs to 48,
    50 prefill graph sizes; reserved 512 + 4096 x 1.5 + 1/8 x 1024 + 48 x 2 + 50 x 8 = 7,280 MiB;
    round((32607 - 7280) / 32607, 3) = 0.777; the vision tower (1152 wide, `depth` not read, so
    24 layers) scales it by 0.95 x (1 - 0.1 x (1152^2 / 1024^2 - 1)) = 0.9248: 0.7185."""
    shape = read_checkpoint(CHECKPOINT)
    assert len(prefill_graph_sizes(4096)) == 50
    default = sglang_default_mem_fraction_static(32_607, shape)
    assert default.reserved_mb == 7_280 and default.decode_max_bs == 48
    assert default.value == pytest.approx(0.777 * 0.95 * (1 - 0.1 * (1152**2 / 1024**2 - 1)))
    plan = _plan(STOCK + FP8_KV + [f"mem-fraction-static={default.value}"])
    # with the default the pool would be a quarter of what the source measured: its stock runs
    # set the fraction, as every launch it describes does (0.88)
    assert _error(plan.pool_tokens, SOURCE["stock"][0]) < -0.5


# -- the source's memory work, step by step ("Buying back memory") ---------------------------
# Each step adds to the one before, as the source did, with MTP at SGLang's own shape for this
# model (3 steps, 4 draft tokens: the source moved to 5 steps only later, with FR-Spec):
#   share     patch 0002, the draft shares the target's embedding and head before the pool is sized
#   state     + the state in bf16, ReplaySSM verification, the state slots pinned for 8 requests
#             (flags 0.5.23 has: --mamba-ssm-dtype, --enable-linear-replayssm-spec,
#             --max-mamba-cache-size 40 = 8 x 5 slots), 8 running requests
#   fp8 draft + patch 0003 with SGLANG_MTP_FP8_AT_LOAD=1 (the profile's env turns it on)
STEPS = {
    "share": (STOCK_MTP + FP8_KV, "0002-draft-shares-embed-and-head-before-pool.patch", (244_000, 3)),
    "state": (
        STOCK_MTP
        + FP8_KV
        + [
            "mamba-ssm-dtype=bfloat16",
            "enable-linear-replayssm-spec=true",
            "max-mamba-cache-size=40",
            "max-running-requests=8",
        ],
        "0002-draft-shares-embed-and-head-before-pool.patch",
        (303_000, 8),
    ),
    "fp8 draft": (
        STOCK_MTP
        + FP8_KV
        + [
            "mamba-ssm-dtype=bfloat16",
            "enable-linear-replayssm-spec=true",
            "max-mamba-cache-size=40",
            "max-running-requests=8",
        ],
        "0002-draft-shares-embed-and-head-before-pool.patch,0003-mtp-draft-fp8-at-load.patch",
        (358_000, 8),
    ),
}
# The planner is above the source after each patch, increasingly (+15.8%, +18.9%, +23.4%) while
# it is within 2.4-5.4% of the stock launches: each step bought the source less than SGLang's
# arithmetic gives it (docs/memory.md). Each step has its own window, argued from what holds it:
#   share      0002's arithmetic is held by a real server (the lent H200, 0.5.17's port: +83,248
#              tokens measured and planned); what is left is the source's own 0.5.22 patch freeing
#              less: at most 20% above the source, and never below it
#   state      flags 0.5.23 has, arithmetic held on the H200 for the slots (40 -> 50 with the
#              patch) but not for ReplaySSM's window: 2 points more than `share` at most, +22%
#   fp8 draft  0003 has not run on a real card (the plan says so, with this figure beside it):
#              its step is the least held, +26% at most; a planner change that moves any step
#              out of its window has to argue the new one here
STEP_WINDOWS = {"share": (0.10, 0.20), "state": (0.13, 0.22), "fp8 draft": (0.17, 0.26)}


@pytest.mark.parametrize("step", list(STEPS))
def test_each_memory_patch_moves_the_pool_and_requests_as_the_source_measured(step: str) -> None:
    sets, names, (tokens, requests) = STEPS[step]
    plan = _plan(sets, patches=names)
    assert [p.split(":")[0] for p in plan.patches] == names.split(",")
    low, high = STEP_WINDOWS[step]
    assert low <= _error(plan.pool_tokens, tokens) <= high, (step, plan.pool_tokens, tokens)
    assert plan.max_running_requests == requests, (step, plan.max_running_requests)
    # an effect no real card has held is printed as such, with the source's figure beside the plan's
    uncalibrated = [u["patch"] for u in plan.uncalibrated]
    assert uncalibrated == (["0003-mtp-draft-fp8-at-load.patch"] if "0003" in names else [])
    if uncalibrated:
        assert "358,000 tokens and 8 running requests" in plan.uncalibrated[0]["note"]
        assert f"this plan says {plan.pool_tokens:,} and 8" in plan.uncalibrated[0]["note"]


def test_the_steps_only_ever_add_memory_to_the_pool() -> None:
    """181K -> 244K -> 303K -> 358K in the source; the planner's pool grows at every step, and
    by exactly what each patch frees when the state slots are pinned."""
    pools = [_plan(STOCK_MTP + FP8_KV).pool_tokens] + [
        _plan(s, patches=n).pool_tokens for s, n, _ in STEPS.values()
    ]
    assert pools == sorted(pools) and len(set(pools)) == 4
    # with the slots pinned, the FP8 draft's saving goes to the KV pool whole: the MTP layer's
    # bf16 bytes less its FP8 bytes, over 10,240 bytes per token (10 fp8 layers; the draft's KV
    # is outside the cell for a Qwen3.6 config)
    shape = read_checkpoint(CHECKPOINT)
    from deploytool.memory.weights import draft_layers_fp8_bytes

    saved = shape.draft_layer_bytes() - draft_layers_fp8_bytes(shape)
    assert abs(pools[3] - pools[2] - saved / 10_240) <= 1


def test_the_shipped_5090_profile_fits_with_its_patches_and_not_without() -> None:
    """The profile (the source's final launch: MTP 5 steps, the flags of the `state` step, the
    whole series with the FP8 draft turned on) plans to a full 256K conversation and 8 running
    requests; the same launch on stock wheels does not, the source's own finding."""
    patched = plan_memory_command(PlanMemoryRequest.from_options(PROFILE, checkpoint=CHECKPOINT))
    assert patched.verdict == "fits", patched.problems
    assert patched.kv_cache_dtype == "fp8_e4m3" and patched.max_running_requests == 8
    assert patched.pool_tokens >= 262_144
    assert any(
        p.startswith("0003-mtp-draft-fp8-at-load.patch") and "not turned on" not in p for p in patched.patches
    )
    stock = plan_memory_command(
        PlanMemoryRequest.from_options(PROFILE, checkpoint=CHECKPOINT, patches="none")
    )
    assert stock.verdict == "error" and stock.pool_tokens < 262_144 and stock.patches == []


def test_the_stock_5090_profile_fits_unpatched_wheels_without_mtp() -> None:
    plan = plan_memory_command(PlanMemoryRequest.from_options(PROFILE + "-stock", checkpoint=CHECKPOINT))
    assert plan.verdict == "fits", plan.problems
    assert plan.patches == [] and plan.draft_weights_gib == 0
    assert plan.pool_tokens >= 262_144 and plan.max_running_requests == 8
