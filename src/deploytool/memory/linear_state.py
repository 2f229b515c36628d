"""The linear-attention (Mamba / Gated-DeltaNet) state of a hybrid model: bytes per request,
slots per running request and how many slots SGLang 0.5.23 sizes (0.5.17 where a rule differs:
releases.py), with the speculative
scratch beside them (paths under sglang/srt/).

  per request  configs/mamba_utils.py `mamba_cache_per_req`: conv state (bf16,
               SGLANG_MAMBA_CONV_DTYPE) + temporal state (float32 unless mamba-ssm-dtype says
               otherwise), times the linear-attention layers; shapes from configs/qwen3_next.py.
  ratio        mem_cache/kv_cache_configurator.py `_calculate_mamba_ratio`: 3 slots per
               running request, + 2 with the extra-buffer radix cache and the overlap scheduler.
  slots        same file `_handle_max_mamba_cache`: `--max-mamba-cache-size` when set; else
               `mamba_full_memory_ratio / (1 + ratio)` (0.9) of the budget, solved jointly with
               the per-draft-token intermediate state under speculative decoding; `(K + 1)`
               slots are allocated.
  ReplaySSM    `--enable-linear-replayssm-spec` (GDN): no per-draft-token state; a replay
               window of `replayssm_ring_bytes_per_req(linear_replayssm_cache_len)` per running
               request (+1) instead, a fixed charge beside the slots.
"""

from __future__ import annotations

from dataclasses import dataclass

from .checkpoint import ModelShape
from .inputs import PlanInputs
from .releases import EXTRA_BUFFER_ARCHS, rules_release

STATE_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
CONV_BYTES = 2  # SGLANG_MAMBA_CONV_DTYPE default bf16
MAMBA_FULL_MEMORY_RATIO = 0.9  # arg_groups/fields/schedule.py fallback
MAMBA_BASE_RATIO = 3  # kv_cache_configurator.py MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO
REPLAYSSM_CACHE_LEN = 16  # arg_groups/fields/exec_.py linear_replayssm_cache_len default


@dataclass
class LinearState:
    per_request: int = 0
    slots: int | None = None  # max_mamba_cache_size
    ratio: int | None = None  # slots per running request
    state_bytes: float = 0.0  # (slots + 1) x per_request
    spec_bytes: float = 0.0  # per-draft-token intermediate state, or the ReplaySSM window
    replayssm: bool = False


def state_bytes_per_request(shape: ModelShape, *, ssm_dtype: str, tp_size: int) -> int:
    """configs/mamba_utils.py `Mamba2StateShape.create` + `mamba_cache_per_req` with the
    Gated-DeltaNet shapes of configs/qwen3_next.py `mamba2_cache_params`."""
    if not shape.is_hybrid_linear:
        return 0
    n_groups = shape.linear_num_key_heads
    if n_groups % tp_size:
        n_groups += tp_size - n_groups  # extra_groups_for_head_shards
    intermediate = shape.linear_value_head_dim * shape.linear_num_value_heads
    conv_dim = intermediate + 2 * n_groups * shape.linear_key_head_dim
    conv = conv_dim // tp_size * (shape.linear_conv_kernel_dim - 1) * 2  # bf16 conv state
    temporal = (
        (shape.linear_num_value_heads // tp_size) * shape.linear_value_head_dim * shape.linear_key_head_dim
    )
    return (conv + temporal * STATE_DTYPE_BYTES[ssm_dtype]) * len(shape.linear_attention_layer_ids)


def replayssm_window_bytes(shape: ModelShape, *, record_len: int, tp_size: int) -> int:
    """configs/mamba_utils.py `replayssm_ring_bytes_per_req` for Gated DeltaNet: d, normalized k
    and the fp32 gate per step, plus the low parts of d and k when the conv dtype is not fp32."""
    hv = shape.linear_num_value_heads // tp_size
    hk = max(1, shape.linear_num_key_heads // tp_size)
    v_dim, k_dim = shape.linear_value_head_dim, shape.linear_key_head_dim
    per_layer = (
        hv * record_len * v_dim * CONV_BYTES + hk * record_len * k_dim * CONV_BYTES + hv * record_len * 4
    )
    per_layer += (
        hv * record_len * v_dim * CONV_BYTES + hk * record_len * k_dim * CONV_BYTES
    )  # low parts (bf16 conv)
    return per_layer * len(shape.linear_attention_layer_ids)


def plan_linear_state(
    shape: ModelShape, inputs: PlanInputs, *, rest: float, per_req: int, draft_tokens: int, tp: int
) -> LinearState:
    """The slots and bytes `_handle_max_mamba_cache` gives a budget of `rest` bytes."""
    ratio = mamba_ratio(shape, inputs)
    replay = bool(inputs.enable_linear_replayssm_spec and draft_tokens)
    requested = inputs.max_running_requests
    if replay:
        window = replayssm_window_bytes(shape, record_len=inputs.linear_replayssm_cache_len, tp_size=tp)
        fixed = float(window * (max(1, requested or 1) + 1))
        if inputs.max_mamba_cache_size is not None:
            slots = inputs.max_mamba_cache_size
        elif inputs.disable_radix_cache and requested is not None:
            slots = max(1, requested)
        else:
            r = (
                inputs.mamba_full_memory_ratio
                if inputs.mamba_full_memory_ratio is not None
                else MAMBA_FULL_MEMORY_RATIO
            )
            slots = int((rest * r / (1 + r) - fixed - per_req) // per_req)
        spec = fixed
    else:
        slots, spec = _slots(rest, per_req, ratio, inputs, draft_tokens)
    return LinearState(
        per_request=per_req,
        slots=slots,
        ratio=ratio,
        replayssm=replay,
        spec_bytes=spec,
        state_bytes=float((slots + 1) * per_req) if slots > 0 else 0.0,
    )


def mamba_ratio(shape: ModelShape, inputs: PlanInputs) -> int:
    """kv_cache_configurator.py `_calculate_mamba_ratio`; the strategy `auto` resolves to
    extra_buffer for the architectures that support it, on the triton linear-attention backend,
    when the overlap scheduler is on or pages are larger than one token
    (arg_groups/overrides.py `_mamba_radix_cache_resolution`, the runtime release's list)."""
    if inputs.disable_radix_cache:
        return 1
    strategy = inputs.mamba_radix_cache_strategy
    if strategy == "auto":
        release, _ = rules_release(inputs.runtime_version)
        supported = (
            shape.architecture in EXTRA_BUFFER_ARCHS[release] and inputs.linear_attn_backend == "triton"
        )
        strategy = (
            "extra_buffer"
            if supported and (not inputs.disable_overlap_schedule or inputs.page_size > 1)
            else "no_buffer"
        )
    if strategy == "extra_buffer":
        return MAMBA_BASE_RATIO + (1 if inputs.disable_overlap_schedule else 2)  # get_mamba_tracking_slots
    if strategy == "extra_buffer_lazy":
        return MAMBA_BASE_RATIO + 1
    return MAMBA_BASE_RATIO


def _slots(rest: float, per_req: int, ratio: int, inputs: PlanInputs, draft_tokens: int) -> tuple[int, float]:
    """(max_mamba_cache_size, bytes of the speculative intermediate state), following the three
    branches of `_handle_max_mamba_cache`."""
    requested = inputs.max_running_requests
    if inputs.max_mamba_cache_size is not None:
        slots = inputs.max_mamba_cache_size
        capped = min(max(1, requested or 1), slots // ratio)
        return slots, float(per_req * (capped + 1) * draft_tokens)
    if inputs.disable_radix_cache and requested is not None:
        return max(1, requested), float(per_req * (max(1, requested) + 1) * draft_tokens)
    r = (
        inputs.mamba_full_memory_ratio
        if inputs.mamba_full_memory_ratio is not None
        else MAMBA_FULL_MEMORY_RATIO
    )
    budget = rest * r / (1 + r)
    if draft_tokens:
        if requested is None:
            raise ValueError(
                "speculative decoding on a hybrid model needs max-running-requests "
                "(SGLang asserts it in _handle_max_mamba_cache)"
            )
        slots = int((budget - per_req * (1 + draft_tokens)) // (per_req * (1 + draft_tokens / ratio)))
        capped = min(max(1, requested), slots // ratio)
        return slots, float(per_req * (capped + 1) * draft_tokens)
    return int((budget - per_req) // per_req), 0.0
