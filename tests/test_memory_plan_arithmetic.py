"""The memory planner's arithmetic, pinned to hand-worked examples of SGLang 0.5.23's own
(paths under sglang/srt/, line numbers of the 0.5.23 wheel):

- mem_cache/kv_cache_configurator.py:2990 `_profile_available_bytes`: rest = free after load
  - pre_model_load x (1 - mem_fraction_static) - multimodal reservation (SGLANG_VLM_CACHE_SIZE_MB
  = 100, environ.py:1598); pre_model_load is measured at the end of init_torch_distributed
  (distributed/bootstrap.py), before the scheduler's forward stream (70 MiB), DeepGEMM's buffer
  (32 MiB) and a MoE's expert map (layers x experts x experts x 8 B) take their share of the free
  memory the weights load into.
- same file :3229 `_handle_max_mamba_cache`, the ratio branch with speculative decoding:
  K = (budget - per_req (1 + D)) // (per_req (1 + D / ratio)); intermediate = per_req (capped + 1) D;
  state = (K + 1) per_req; budget = rest x 0.9 / 1.9 (mamba_full_memory_ratio fallback 0.9).
- same file :3062 `_calculate_mamba_ratio`: 3 + 2 tracking slots (extra_buffer, overlap on).
- model_executor/pool_configurator.py:340 `_compute_cell_size`: kv heads x (head_dim + v_head_dim)
  x full-attention layers x dtype bytes; :260-315 EAGLE adds int(cell x draft layers / layers) when
  model_runner_components/spec_aux_hidden_state.py:171-174 found num_nextn_predict_layers.
- same file :637 `calculate_pool_sizes`: tokens = budget // cell.
- configs/mamba_utils.py:116 `mamba_cache_per_req`, shapes from configs/qwen3_next.py:288.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from deploytool.memory import PlanInputs, card_from_table, plan_memory, read_checkpoint, shape_from_config
from deploytool.memory.plan import kv_cell_bytes, state_bytes_per_request

MODELS = Path(__file__).parent / "data" / "models"
MIB = 1 << 20


@pytest.fixture(scope="module")
def qwen36_fp8():
    return read_checkpoint(MODELS / "qwen3.6-35b-a3b-fp8")


def test_hybrid_config_reads_ten_full_attention_and_thirty_linear_layers(qwen36_fp8) -> None:
    assert qwen36_fp8.full_attention_layer_ids == [3, 7, 11, 15, 19, 23, 27, 31, 35, 39]
    assert len(qwen36_fp8.linear_attention_layer_ids) == 30
    assert qwen36_fp8.draft_layers == 1 and qwen36_fp8.multimodal and qwen36_fp8.weight_precision == "fp8"
    assert qwen36_fp8.weight_bytes == 37_450_000_000


def test_kv_cell_counts_full_attention_layers_only(qwen36_fp8) -> None:
    # 2 KV heads x (256 + 256) x 10 full-attention layers x 2 bytes (bf16)
    assert kv_cell_bytes(qwen36_fp8, kv_bytes=2, tp_size=1) == (2 * 512 * 10 * 2, 0)
    # fp8: half; TP2 gives each GPU one of the two KV heads; TP4 still one (never fewer)
    assert kv_cell_bytes(qwen36_fp8, kv_bytes=1, tp_size=1)[0] == 10_240
    assert kv_cell_bytes(qwen36_fp8, kv_bytes=2, tp_size=2)[0] == 10_240
    assert kv_cell_bytes(qwen36_fp8, kv_bytes=2, tp_size=4)[0] == 10_240


def test_gated_deltanet_state_per_request(qwen36_fp8) -> None:
    # conv: (32 x 128 + 2 x 16 x 128) x (4 - 1) x 2 bytes = 49,152; temporal: 32 x 128 x 128
    conv = (32 * 128 + 2 * 16 * 128) * 3 * 2
    assert (
        state_bytes_per_request(qwen36_fp8, ssm_dtype="float32", tp_size=1)
        == (conv + 32 * 128 * 128 * 4) * 30
    )
    assert (
        state_bytes_per_request(qwen36_fp8, ssm_dtype="bfloat16", tp_size=1)
        == (conv + 32 * 128 * 128 * 2) * 30
    )
    assert (
        state_bytes_per_request(qwen36_fp8, ssm_dtype="float32", tp_size=2)
        == (conv // 2 + 16 * 128 * 128 * 4) * 30
    )


def test_h200_profile_worked_example(qwen36_fp8) -> None:
    """h200-qwen3.6-35b-a3b-fp8: mem-fraction-static 0.90, NEXTN with 4 draft tokens, 64 requests."""
    inputs = PlanInputs(
        context_length=262_144,
        mem_fraction_static=0.90,
        max_running_requests=64,
        speculative_algorithm="NEXTN",
        speculative_num_draft_tokens=4,
        min_running_requests=64,
    )
    plan = plan_memory(qwen36_fp8, card_from_table("h200"), inputs)
    pre = (143_771 - 616 - 621) * MIB  # NVML total - idle driver use - SGLang's CUDA context and dist init
    # allocated after pre_model_load_memory is measured, before the weights load: the forward
    # stream, DeepGEMM's buffer, the expert map of 40 layers x 256 x 256 experts (int64)
    free = pre - 70 * MIB - 32 * MIB - 40 * 256 * 256 * 8
    rope = 262_144 * 64 * 4  # the rotary cos/sin table: positions x (256 x 0.25) x fp32
    weights = 37_450_000_000 + rope + 248_320 * 2048 * 2 * 2  # + the draft's private bf16 embedding and head
    rest = free - weights - pre * (1 - 0.90) - 100 * MIB
    per_req = 64_389_120
    budget = rest * 0.9 / 1.9
    slots = int((budget - per_req * (1 + 4)) // (per_req * (1 + 4 / 5)))
    assert slots == 384 == plan.state_slots
    spec_state = per_req * (min(64, slots // 5) + 1) * 4
    kv_budget = rest - spec_state - (slots + 1) * per_req
    # The config says mtp_num_hidden_layers, not num_nextn_predict_layers: SGLang sizes the pool on
    # the target's cell and allocates the draft's one-layer pool afterwards, out of the slack
    # (measured on an H200: docs/memory.md).
    cell = 20_480
    assert plan.kv_bytes_per_token_with_draft == cell
    assert plan.pool_tokens == int(kv_budget // cell) == 2_597_502
    assert plan.draft_kv_outside_pool_gib == round(2_597_502 * 2_048 / 2**30, 2)
    assert plan.max_running_requests == 64  # min(64, tokens // 2, 384 // 5 = 76)
    assert plan.requests_at_full_context == 2_597_502 // 262_144 == 9
    assert plan.verdict == "fits" and plan.problems == []
    # memory_usage.weight is the target's: the MTP layer is the draft's, with its private vocabulary
    mtp = (
        (16 * 256 * 2 + 2 * 2 * 256 + 16 * 256) * 2048
        + (256 * 3 * 512 + 3 * 512 + 256) * 2048
        + 2 * 2048 * 2048
    )
    assert plan.weights_gib == round((37_450_000_000 - mtp + rope) / 2**30, 2)
    assert plan.draft_weights_gib == round((mtp + 248_320 * 2048 * 2 * 2) / 2**30, 2)


def test_draft_kv_joins_the_cell_only_when_the_config_says_num_nextn_predict_layers(qwen36_fp8) -> None:
    """pool_configurator.py scales the cell by the draft's layers only when
    spec_aux_hidden_state.py read num_nextn_predict_layers from the config (0.5.17 and 0.5.23);
    a Qwen3.5/3.6 config names its MTP layers mtp_num_hidden_layers, and a real 0.5.17 server
    sized the pool on the target's 20,480 B cell and put the draft's pool in the slack."""
    inputs = PlanInputs(
        context_length=262_144,
        mem_fraction_static=0.90,
        max_running_requests=64,
        speculative_algorithm="NEXTN",
        speculative_num_draft_tokens=4,
    )
    card = card_from_table("h200")
    qwen = plan_memory(qwen36_fp8, card, inputs)
    declared = dataclasses.replace(qwen36_fp8, nextn_layers_in_config=True)
    scaled = plan_memory(declared, card, inputs)
    assert qwen.kv_bytes_per_token_with_draft == 20_480 and scaled.kv_bytes_per_token_with_draft == 22_528
    assert scaled.draft_kv_outside_pool_gib == 0.0 < qwen.draft_kv_outside_pool_gib
    # the same budget: the pool differs by the cell alone
    assert abs(qwen.pool_tokens * 20_480 - scaled.pool_tokens * 22_528) < 22_528
    assert read_checkpoint(MODELS / "glm-5.2-nvfp4").nextn_layers_in_config
    assert not qwen36_fp8.nextn_layers_in_config
    # a slack too small for the draft's pool is an error: the upper edge holds it with the rest
    tight = plan_memory(qwen36_fp8, card, dataclasses.replace(inputs, mem_fraction_static=0.999))
    assert tight.verdict == "error"
    assert any(
        "leaves too little beside the pool" in p and "the MTP draft's KV pool" in p for p in tight.problems
    )


def test_moe_without_linear_attention_divides_the_whole_budget_by_the_cell() -> None:
    shape = read_checkpoint(MODELS / "qwen3-30b-a3b")
    assert shape.is_moe and not shape.is_hybrid_linear and shape.num_experts == 128
    inputs = PlanInputs(
        context_length=32_768, mem_fraction_static=0.85, max_running_requests=48, kv_cache_dtype="fp8_e4m3"
    )
    plan = plan_memory(shape, card_from_table("rtx-pro-6000"), inputs)
    pre = (97_887 - 616 - 621) * MIB
    rope = 40_960 * 128 * 4  # the rotary cos/sin table (max positions x head_dim x fp32)
    free = pre - 70 * MIB - 32 * MIB - 48 * 128 * 128 * 8  # stream, DeepGEMM, expert map
    rest = free - 61_064_245_248 - rope - pre * 0.15
    cell = 4 * (128 + 128) * 48 * 1  # 4 KV heads, 48 layers, fp8
    assert plan.kv_bytes_per_token == cell == 49_152
    assert plan.pool_tokens == int(rest // cell)
    assert plan.state_bytes_per_request == 0 and plan.state_slots is None
    assert plan.max_running_requests == 48


def test_mla_with_dsa_indexer_and_fp8_latent() -> None:
    """GLM-5.x: calculate_mla_kv_cache_dim (kv_cache_configurator.py:3412) with FP8 keeps the
    latent's fp32 block scales and a bf16 rope part; the DSA indexer adds fp8 keys + scale."""
    shape = read_checkpoint(MODELS / "glm-5.2-nvfp4")
    latent = 512 + 512 // 128 * 4 + 64 * 2
    indexer = 128 + 128 // 128 * 4
    assert kv_cell_bytes(shape, kv_bytes=1, tp_size=8) == ((latent + indexer) * 78, indexer * 78)
    inputs = PlanInputs(
        context_length=90_000,
        mem_fraction_static=0.87,
        kv_cache_dtype="fp8_e4m3",
        tp_size=8,
        max_running_requests=16,
        speculative_algorithm="EAGLE",
        speculative_num_draft_tokens=6,
        min_running_requests=16,
    )
    plan = plan_memory(shape, card_from_table("b300", count=8), inputs)
    # the latent is replicated on every GPU (not split by TP); the draft adds one layer of each
    assert plan.kv_bytes_per_token_with_draft == (latent + indexer) * 78 + latent + indexer
    assert plan.fits and plan.max_running_requests == 16


def test_kv_dtype_auto_follows_the_checkpoint_kv_quantization() -> None:
    config = {
        "architectures": ["X"],
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "hidden_size": 256,
        "vocab_size": 100,
        "quantization_config": {
            "quant_method": "modelopt",
            "quant_algo": "FP8",
            "kv_cache_quant_algo": "FP8",
        },
    }
    shape = shape_from_config(config)
    shape.weight_bytes = 10**9
    plan = plan_memory(
        shape, card_from_table("h200"), PlanInputs(context_length=4096, mem_fraction_static=0.9)
    )
    assert plan.kv_cache_dtype == "fp8_e4m3"
    assert plan.kv_bytes_per_token == 4 * 64 * 2 * 2 * 1  # heads x (head_dim + v_head_dim) x layers x 1 byte


def test_weights_over_the_static_budget_are_an_error_with_sglangs_advice(qwen36_fp8) -> None:
    inputs = PlanInputs(context_length=262_144, mem_fraction_static=0.2)
    plan = plan_memory(qwen36_fp8, card_from_table("h200"), inputs)
    assert plan.verdict == "error" and plan.pool_tokens == 0
    above = float(plan.problems[0].split("raise it above ")[1].split(" ")[0])
    assert 0.2 < above < 1


def test_weights_larger_than_the_card_are_not_advised_an_impossible_fraction(qwen36_fp8) -> None:
    plan = plan_memory(
        qwen36_fp8, card_from_table("rtx5090"), PlanInputs(context_length=262_144, mem_fraction_static=0.5)
    )
    assert plan.verdict == "error" and plan.pool_tokens == 0
    assert (
        "raise it above" not in plan.problems[0]
        and "no mem-fraction-static makes them fit" in plan.problems[0]
    )


def test_without_speculative_decoding_slots_are_budget_over_state(qwen36_fp8) -> None:
    inputs = PlanInputs(context_length=262_144, mem_fraction_static=0.90, max_running_requests=64)
    plan = plan_memory(qwen36_fp8, card_from_table("h200"), inputs)
    pre = (143_771 - 616 - 621) * MIB
    # no draft: no private embedding copy, and the MTP layer stays on disk (models/qwen3_5.py
    # skips mtp.*): q with its output gate, k, v, o + 256 experts, the shared expert and the
    # router + fc, at the checkpoint's FP8 (its quantization does not exclude mtp*)
    mtp = (
        (16 * 256 * 2 + 2 * 2 * 256 + 16 * 256) * 2048
        + (256 * 3 * 512 + 3 * 512 + 256) * 2048
        + 2 * 2048 * 2048
    )
    assert qwen36_fp8.draft_layer_bytes() == mtp
    rest = (
        pre - 122 * MIB - (37_450_000_000 - mtp + 262_144 * 64 * 4) - pre * 0.1 - 100 * MIB
    )  # + the rotary table
    budget = rest * 0.9 / 1.9
    assert plan.state_slots == int((budget - 64_389_120) // 64_389_120)
    assert plan.spec_state_gib == 0
    assert plan.pool_tokens == int((rest - (plan.state_slots + 1) * 64_389_120) // 20_480)


def test_disable_radix_cache_sizes_state_by_running_requests(qwen36_fp8) -> None:
    inputs = PlanInputs(
        context_length=262_144, mem_fraction_static=0.90, max_running_requests=8, disable_radix_cache=True
    )
    plan = plan_memory(qwen36_fp8, card_from_table("h200"), inputs)
    assert plan.state_slots == 8 and plan.state_slots_per_request == 1
