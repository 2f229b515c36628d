"""Predict SGLang 0.5.23's memory pools before a start: weights, KV bytes per token, the
linear-attention state per request, the KV pool in tokens and the running requests it allows.

The arithmetic is SGLang's own, read from its source (paths under sglang/srt/):

  budget   mem_cache/kv_cache_configurator.py `_profile_available_bytes`: the KV budget is the
           memory free after the weights load, minus `pre_model_load_memory x (1 -
           mem_fraction_static)` (the slack for activations and CUDA graphs), minus the
           multimodal reservation (`mm_runtime_reservation_gb`, SGLANG_VLM_CACHE_SIZE_MB = 100).
  state    `_handle_max_mamba_cache` (same file): a hybrid model's Mamba/Gated-DeltaNet state
           takes `mamba_full_memory_ratio / (1 + ratio)` of the budget (0.9 when unset,
           arg_groups/fields/schedule.py); with speculative decoding the slot count K is solved
           jointly with the per-draft-token intermediate state; `(K + 1)` slots are allocated.
           The state per request is configs/mamba_utils.py `mamba_cache_per_req`: conv state
           (bf16, SGLANG_MAMBA_CONV_DTYPE) + temporal state (float32 unless mamba-ssm-dtype says
           otherwise), times the linear-attention layers; shapes from configs/qwen3_next.py.
  cell     model_executor/pool_configurator.py `DefaultPoolConfigurator._compute_cell_size`:
           kv heads per GPU x (head_dim + v_head_dim) x full-attention layers x KV dtype bytes
           (MLA: one latent of kv_lora_rank + qk_rope_head_dim per layer, `calculate_mla_kv_
           cache_dim`, plus the DSA indexer); EAGLE/NEXTN adds the draft's layers in proportion.
  tokens   `DefaultPoolConfigurator.calculate_pool_sizes`: budget // cell, page aligned.
  requests `KVCacheConfigurator.resolve_max_num_reqs`: min(requested, tokens // 2), and for a
           hybrid model also max_mamba_cache_size // mamba ratio (3, + 2 with the extra-buffer
           radix cache and the overlap scheduler: `_calculate_mamba_ratio`).

What it cannot know before a start, it assumes and says so in `assumptions`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .cards import GIB, MIB, Card
from .checkpoint import ModelShape

SGLANG_VERSION = "0.5.23"
# NVML's total minus free on an idle H200 (docs/measured/h200-gpus.json: 143771 - 143155 MiB).
DRIVER_RESERVE_BYTES = 616 * MIB
# The CUDA context torch creates before SGLang measures pre_model_load_memory: NVML's free
# memory fell by 620 MiB on an H200 (torch 2.11, docs/measured/h200-copy-bandwidth.json).
TORCH_CONTEXT_BYTES = 620 * MIB
VLM_CACHE_BYTES = 100 * MIB  # environ.py SGLANG_VLM_CACHE_SIZE_MB default
MAMBA_FULL_MEMORY_RATIO = 0.9  # arg_groups/fields/schedule.py fallback
MAMBA_BASE_RATIO = 3  # mem_cache/kv_cache_configurator.py MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO
# arg_groups/overrides.py _MAMBA_EXTRA_BUFFER_ARCHS: the radix cache keeps extra state slots
EXTRA_BUFFER_ARCHS = frozenset({
    "KimiLinearForCausalLM", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
    "Qwen3_5MoeForCausalLM", "Qwen3_5ForCausalLM", "Qwen3NextForCausalLM", "Qwen4ExpForConditionalGeneration",
    "InternS2PreviewForConditionalGeneration", "MiniCPMV4_6ForConditionalGeneration",
})
KV_DTYPE_BYTES = {"bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1, "mxfp8": 1}
STATE_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
DSA_QUANT_BLOCK = 128  # mem_cache/memory_pool.py DSATokenToKVPool.quant_block_size


@dataclass
class PlanInputs:
    """The launch settings that size the pools (SGLang's flag names, as in server.args)."""

    context_length: int
    mem_fraction_static: float
    kv_cache_dtype: str = "auto"
    max_running_requests: int | None = None
    tp_size: int = 1
    page_size: int = 1
    speculative_algorithm: str | None = None
    speculative_num_draft_tokens: int | None = None
    mamba_ssm_dtype: str | None = None
    max_total_tokens: int | None = None
    max_mamba_cache_size: int | None = None
    mamba_full_memory_ratio: float | None = None
    disable_radix_cache: bool = False
    disable_overlap_schedule: bool = False
    mamba_radix_cache_strategy: str = "auto"
    vlm_cache_bytes: int = VLM_CACHE_BYTES
    # the profile's own demands (qualify.preflight)
    min_running_requests: int = 1
    require_full_context_kv: bool = True


@dataclass
class MemoryPlan:
    card: str
    card_source: str
    model: str
    gpus: int
    kv_cache_dtype: str
    mem_fraction_static: float
    context_length: int
    pre_model_load_gib: float
    weights_gib: float
    slack_gib: float
    multimodal_reserve_gib: float
    state_gib: float
    spec_state_gib: float
    kv_pool_gib: float
    kv_bytes_per_token: int  # the target's KV, full-attention layers only
    kv_bytes_per_token_with_draft: int  # the cell SGLang divides the budget by
    state_bytes_per_request: int  # linear-attention state of one running request (0: none)
    state_slots: int | None  # max_mamba_cache_size
    state_slots_per_request: int | None  # the mamba ratio
    pool_tokens: int
    max_running_requests: int
    requests_at_full_context: int
    verdict: str  # "fits" or "error"
    # an MTP draft's KV pool that SGLang allocates after sizing the pool, out of the slack
    draft_kv_outside_pool_gib: float = 0.0
    # what the server reports as memory_usage.weight and .kvcache: the target model's weights and
    # the target's own pool (the draft's weights and KV are not in them)
    target_weights_gib: float = 0.0
    target_kv_pool_gib: float = 0.0
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    profile: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    sglang_version: str = SGLANG_VERSION

    @property
    def fits(self) -> bool:
        return self.verdict == "fits"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def kv_dtype_bytes(shape: ModelShape, kv_cache_dtype: str) -> tuple[str, int]:
    """mem_cache/kv_cache_dtype.py `configure_kv_cache_dtype`: "auto" is fp8 when the checkpoint's
    quantization says kv_cache_quant_algo FP8, else the model's dtype (bf16)."""
    name = kv_cache_dtype or "auto"
    if name == "auto":
        return ("fp8_e4m3", 1) if shape.kv_cache_quant_algo == "FP8" else ("bf16", 2)
    if name not in KV_DTYPE_BYTES:
        raise ValueError(f"kv-cache-dtype {name!r} is not modelled by the planner (known: auto, "
                         + ", ".join(sorted(KV_DTYPE_BYTES)) + ")")
    return name, KV_DTYPE_BYTES[name]


def kv_cell_bytes(shape: ModelShape, *, kv_bytes: int, tp_size: int) -> tuple[int, int]:
    """(target KV bytes per token, DSA indexer bytes per token) on one GPU,
    pool_configurator.py `_compute_cell_size`."""
    layers = len(shape.full_attention_layer_ids)
    indexer = 0
    if shape.is_mla:
        dim = shape.kv_lora_rank + shape.qk_rope_head_dim
        if shape.dsa_index_head_dim and kv_bytes == 1:
            # calculate_mla_kv_cache_dim, FP8 with scales: latent + its fp32 block scales + bf16 rope
            dim = shape.kv_lora_rank + shape.kv_lora_rank // DSA_QUANT_BLOCK * 4 + shape.qk_rope_head_dim * 2
        kv = dim * layers * kv_bytes
        if shape.dsa_index_head_dim:
            # _compute_dsa_indexer_cell_size: fp8 index keys + one fp32 scale per 128, uint8 buffer
            per = shape.dsa_index_head_dim + shape.dsa_index_head_dim // DSA_QUANT_BLOCK * 4
            indexer = per * layers
        return kv + indexer, indexer
    heads = max(1, shape.num_key_value_heads // tp_size)  # configs/model_config.py get_num_kv_heads
    return heads * (shape.head_dim + shape.v_head_dim) * layers * kv_bytes, 0


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
    temporal = (shape.linear_num_value_heads // tp_size) * shape.linear_value_head_dim * shape.linear_key_head_dim
    return (conv + temporal * STATE_DTYPE_BYTES[ssm_dtype]) * len(shape.linear_attention_layer_ids)


def plan_memory(shape: ModelShape, card: Card, inputs: PlanInputs, *, profile: str | None = None,
                overrides: dict[str, Any] | None = None) -> MemoryPlan:
    """The whole prediction for one GPU of the profile (each of `tp_size` cards holds 1/tp)."""
    tp = max(1, inputs.tp_size)
    assumptions: list[str] = []
    problems: list[str] = []
    warnings: list[str] = []
    # From the card's total, not NVML's free memory: `up` plans while the serving release
    # still holds the card, and a plan should not depend on what runs there now.
    pre = card.memory_bytes - DRIVER_RESERVE_BYTES - TORCH_CONTEXT_BYTES
    assumptions.append(f"pre_model_load_memory = the card's memory - {DRIVER_RESERVE_BYTES // MIB} MiB "
                       f"(driver, as on an idle H200) - {TORCH_CONTEXT_BYTES // MIB} MiB (CUDA context, as torch's on an H200)")
    if card.free_bytes is not None and card.free_bytes < pre:
        warnings.append(f"NVML shows {card.free_bytes / GIB:.1f} GiB free on {card.name} now: another process "
                        "holds memory that SGLang would not get")
    if shape.weight_bytes is None:
        raise ValueError(f"{shape.source}: the checkpoint folder has no safetensors index and no "
                         "*.safetensors files, so its weight size is unknown")
    weights = shape.weight_bytes / tp
    assumptions.append("weights = safetensors total_size / tp_size (the MTP draft layers are in it)")
    spec_on = bool(inputs.speculative_algorithm) and inputs.speculative_algorithm.upper() != "NONE"
    eagle = spec_on and inputs.speculative_algorithm.upper() in ("EAGLE", "NEXTN", "EAGLE3", "STANDALONE")
    if not spec_on and shape.draft_layers:
        # models/qwen3_5.py load_weights skips every mtp.* tensor: without speculative decoding
        # the checkpoint's MTP layers are on disk, not on the GPU.
        unused = shape.draft_layer_bytes() / tp
        weights -= unused
        assumptions.append(f"- {unused / GIB:.2f} GiB: the checkpoint's {shape.draft_layers} MTP layer(s), not loaded "
                           f"without speculative decoding (estimated from the shape in "
                           f"{shape.draft_precision or shape.weight_precision})")
    draft_weights = 0.0
    if eagle and shape.draft_layers:
        # speculative/eagle_worker_v2.py: the draft TpModelWorker loads its own embedding and
        # head in __init__; set_embed_and_head shares the target's only in alloc_memory_pool,
        # after the pool was sized, so the private copies count as used memory.
        copies = 1 if shape.tie_word_embeddings else 2
        draft_private = shape.vocab_size * shape.hidden_size * 2 * copies / tp
        weights += draft_private
        draft_weights = draft_private + shape.draft_layer_bytes() / tp
        assumptions.append(f"+ {draft_private / GIB:.2f} GiB: the MTP draft's own bf16 embedding and head, "
                           "loaded before the pool is sized and shared with the target only after")
    slack = pre * (1 - inputs.mem_fraction_static)
    mm = inputs.vlm_cache_bytes if shape.multimodal else 0
    rest = pre - weights - slack - mm
    kv_name, kv_bytes = kv_dtype_bytes(shape, inputs.kv_cache_dtype)
    draft_tokens = (inputs.speculative_num_draft_tokens or 0) if spec_on else 0

    ssm_dtype = inputs.mamba_ssm_dtype or shape.mamba_ssm_dtype or "float32"
    per_req = state_bytes_per_request(shape, ssm_dtype=ssm_dtype, tp_size=tp)
    state = spec_state = 0.0
    slots = ratio = None
    if rest <= 0:
        minimum = 1 - (pre - weights) / pre
        problems.append(f"the weights ({weights / GIB:.1f} GiB) leave no memory for the KV cache under "
                        f"mem-fraction-static {inputs.mem_fraction_static}: raise it above {minimum:.3f} "
                        "(SGLang refuses the start with the same advice)")
        rest = 0.0
    elif per_req:
        ratio = _mamba_ratio(shape, inputs)
        slots, spec_state = _mamba_slots(rest, per_req, ratio, inputs, draft_tokens if spec_on else 0)
        if slots <= 0:
            problems.append(f"not enough memory for the linear-attention state: {slots} slots of "
                            f"{per_req / MIB:.1f} MiB (SGLang refuses the start)")
            slots, rest = 0, 0.0
        else:
            state = (slots + 1) * per_req  # +1: each pool's padding slot
            rest = max(0.0, rest - spec_state - state)
        assumptions.append(f"linear-attention state in {ssm_dtype} (conv state bf16), {ratio} slots per "
                           "running request (radix cache" + (" with extra buffer" if ratio > 3 else "") + ")")

    target_cell, indexer = kv_cell_bytes(shape, kv_bytes=kv_bytes, tp_size=tp)
    cell = target_cell
    draft_cell = 0
    if eagle:
        layers = len(shape.full_attention_layer_ids)
        if shape.draft_layers and layers:
            # the draft's KV has the target's per-layer size
            draft_cell = int((target_cell - indexer) * shape.draft_layers / layers) \
                + (indexer // layers * shape.draft_layers if indexer else 0)
            if shape.nextn_layers_in_config:
                # pool_configurator.py scales the cell by the draft's layers only when
                # spec_aux_hidden_state.py found num_nextn_predict_layers in the config
                cell += draft_cell
                draft_cell = 0
            else:
                # A Qwen3.5/3.6 config says mtp_num_hidden_layers: the pool is sized on the
                # target's cell alone and the draft's pool (same tokens) comes out of the slack
                # afterwards; measured on an H200 (docs/measured/gpu-check-h200.md).
                assumptions.append("the MTP draft's KV pool (its layers, the pool's tokens) is allocated after the "
                                   "pool is sized, out of the slack (the config has no num_nextn_predict_layers)")
        else:
            warnings.append("speculative decoding with a separate draft model: its own pool is not modelled")
    tokens = int(rest // cell) if cell else 0
    page = max(1, inputs.page_size)
    tokens = tokens // page * page
    if inputs.max_total_tokens is not None:
        tokens = min(tokens, inputs.max_total_tokens)
    if draft_cell and tokens * draft_cell > slack:
        problems.append(f"the MTP draft's KV pool ({tokens * draft_cell / GIB:.1f} GiB, allocated after the pool "
                        f"is sized) does not fit in the {slack / GIB:.1f} GiB that mem-fraction-static leaves")

    running = _max_running(tokens, inputs, slots, ratio)
    context = inputs.context_length
    at_context = min(running, tokens // context) if context else running

    if inputs.require_full_context_kv and tokens < context:
        problems.append(f"the KV pool ({tokens:,} tokens) is smaller than one full-context conversation "
                        f"({context:,} tokens)")
    if running < inputs.min_running_requests:
        problems.append(f"SGLang would allow {running} running requests, fewer than qualify.preflight's "
                        f"min_running_requests {inputs.min_running_requests}")
    elif at_context < inputs.min_running_requests and not problems:
        warnings.append(f"only {at_context} of the {running} running requests fit at the full context length "
                        f"at once ({tokens:,} tokens in the pool)")
    return MemoryPlan(
        card=card.name, card_source=card.source, model=shape.architecture, gpus=tp, kv_cache_dtype=kv_name,
        mem_fraction_static=inputs.mem_fraction_static, context_length=context,
        pre_model_load_gib=_gib(pre), weights_gib=_gib(weights), slack_gib=_gib(slack),
        multimodal_reserve_gib=_gib(mm), state_gib=_gib(state), spec_state_gib=_gib(spec_state),
        kv_pool_gib=_gib(tokens * cell), kv_bytes_per_token=target_cell, kv_bytes_per_token_with_draft=cell,
        draft_kv_outside_pool_gib=_gib(tokens * draft_cell),
        target_weights_gib=_gib(weights - draft_weights), target_kv_pool_gib=_gib(tokens * target_cell),
        state_bytes_per_request=per_req, state_slots=slots, state_slots_per_request=ratio, pool_tokens=tokens,
        max_running_requests=running, requests_at_full_context=at_context,
        verdict="error" if problems else "fits", problems=problems, warnings=warnings, assumptions=assumptions,
        profile=profile, overrides=dict(overrides or {}),
    )


def _mamba_ratio(shape: ModelShape, inputs: PlanInputs) -> int:
    """kv_cache_configurator.py `_calculate_mamba_ratio`; the strategy `auto` resolves to
    extra_buffer for the architectures that support it when the overlap scheduler is on
    (arg_groups/overrides.py `_mamba_radix_cache_resolution`)."""
    if inputs.disable_radix_cache:
        return 1
    strategy = inputs.mamba_radix_cache_strategy
    if strategy == "auto":
        supported = shape.architecture in EXTRA_BUFFER_ARCHS
        strategy = "extra_buffer" if supported and (not inputs.disable_overlap_schedule or inputs.page_size > 1) \
            else "no_buffer"
    if strategy == "extra_buffer":
        return MAMBA_BASE_RATIO + (1 if inputs.disable_overlap_schedule else 2)  # get_mamba_tracking_slots
    if strategy == "extra_buffer_lazy":
        return MAMBA_BASE_RATIO + 1
    return MAMBA_BASE_RATIO


def _mamba_slots(rest: float, per_req: int, ratio: int, inputs: PlanInputs, draft_tokens: int) -> tuple[int, float]:
    """(max_mamba_cache_size, bytes of the speculative intermediate state), following the three
    branches of `_handle_max_mamba_cache`."""
    requested = inputs.max_running_requests
    if inputs.max_mamba_cache_size is not None:
        slots = inputs.max_mamba_cache_size
        capped = min(max(1, requested or 1), slots // ratio)
        return slots, float(per_req * (capped + 1) * draft_tokens)
    if inputs.disable_radix_cache and requested is not None:
        return max(1, requested), float(per_req * (max(1, requested) + 1) * draft_tokens)
    r = inputs.mamba_full_memory_ratio if inputs.mamba_full_memory_ratio is not None else MAMBA_FULL_MEMORY_RATIO
    budget = rest * r / (1 + r)
    if draft_tokens:
        if requested is None:
            raise ValueError("speculative decoding on a hybrid model needs max-running-requests "
                             "(SGLang asserts it in _handle_max_mamba_cache)")
        slots = int((budget - per_req * (1 + draft_tokens)) // (per_req * (1 + draft_tokens / ratio)))
        capped = min(max(1, requested), slots // ratio)
        return slots, float(per_req * (capped + 1) * draft_tokens)
    return int((budget - per_req) // per_req), 0.0


def _max_running(tokens: int, inputs: PlanInputs, slots: int | None, ratio: int | None) -> int:
    """kv_cache_configurator.py `resolve_max_num_reqs`."""
    if inputs.max_running_requests is not None:
        running = min(max(1, inputs.max_running_requests), tokens // 2)
    else:
        estimated = max(min(int(tokens / inputs.context_length * 512), 4096), 2048)
        running = min(estimated, tokens // 2)
    if slots is not None and ratio:
        running = min(running, slots // ratio)
    return max(0, running)


def _gib(value: float) -> float:
    return round(value / GIB, 2)
