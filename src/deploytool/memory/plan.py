"""Predict SGLang 0.5.23's memory pools before a start: weights, KV bytes per token, the
linear-attention state per request, the KV pool in tokens and the running requests it allows.

The arithmetic is SGLang's own, read from its source (paths under sglang/srt/):

  budget   mem_cache/kv_cache_configurator.py `_profile_available_bytes`: the KV budget is the
           memory free after the weights load, minus `pre_model_load_memory x (1 -
           mem_fraction_static)` (the slack for activations and CUDA graphs), minus the
           multimodal reservation (`mm_runtime_reservation_gb`, SGLANG_VLM_CACHE_SIZE_MB = 100).
  weights  the target's and, with an EAGLE/NEXTN draft, the draft's when the pool is sized,
           by stock SGLang or the image's patches (weights.py).
  state    `_handle_max_mamba_cache` (same file): a hybrid model's Mamba/Gated-DeltaNet state
           slots and the speculative scratch beside them (linear_state.py).
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
from .inputs import PlanInputs
from .linear_state import LinearState, plan_linear_state, state_bytes_per_request
from .parallel import parallel_problems
from .releases import PLANNER_RELEASE, rules_release
from .upper_edge import PoolFacts, judge, upper_edge
from .weights import Weights, weights_on_gpu

__all__ = [
    "MemoryPlan",
    "PlanInputs",
    "kv_cell_bytes",
    "kv_dtype_bytes",
    "plan_memory",
    "state_bytes_per_request",
]

SGLANG_VERSION = PLANNER_RELEASE
# NVML's total minus free on an idle H200 (docs/measured/h200-gpus.json: 143771 - 143155 MiB).
DRIVER_RESERVE_BYTES = 616 * MIB
# What SGLang's scheduler process holds when it measures pre_model_load_memory, at the end of
# init_torch_distributed (distributed/bootstrap.py): its CUDA context and torch.distributed's
# init (0.09 GB in SGLang's log). Probed in a real SGLang 0.5.17 scheduler on the lent H200:
# 142,534.3 MiB free there, of the 143,155 an idle card has (docs/memory.md, "What SGLang
# measures before loading").
TORCH_CONTEXT_BYTES = 621 * MIB
# What the scheduler allocates after that measure and before its weights load (the same probe,
# between bootstrap.py's measure and "Load weight begin"): the slack is pre_model_load_memory x
# (1 - mem_fraction_static) (kv_cache_configurator.py `_profile_available_bytes`) while the free
# memory the pool is cut from has already lost these.
#   ModelRunner.__init__'s forward stream, the first torch CUDA stream of the process (torch
#   creates its stream pool then): 70 MiB, outside torch's allocator.
FORWARD_STREAM_BYTES = 70 * MIB
#   deep_gemm_wrapper.update_deep_gemm_config (deep_gemm.set_pdl) when ENABLE_JIT_DEEPGEMM: a
#   32 MiB tensor. configurer.py turns DeepGEMM off on SM 12.x, so an RTX 5090 / RTX PRO 6000
#   would not allocate it; it is counted there all the same: no 12.x card's context has been
#   measured (these constants are the H200's), and the RTX 5090 source's stock pools are already
#   2.7-6% (about 90 MB of budget) below this plan, so planning 32 MiB more there would only
#   widen a known overestimate (docs/memory.md).
DEEPGEMM_BYTES = 32 * MIB
#   a MoE's expert-location metadata (eplb/expert_location.py `ExpertLocationMetadata._init_raw`):
#   logical_to_all_physical_map padded to (layers, experts, physical experts) int64, on the GPU
#   (20 MiB for 40 layers of 256 experts, as probed).
EXPERT_MAP_ENTRY_BYTES = 8
KV_DTYPE_BYTES = {"bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1, "mxfp8": 1}
DSA_QUANT_BLOCK = 128  # mem_cache/memory_pool.py DSATokenToKVPool.quant_block_size
# the algorithms whose draft shares the target's pool (the cell grows by the draft's layers)
EAGLE_LIKE = ("EAGLE", "NEXTN", "EAGLE3", "STANDALONE")


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
    weights_gib: float  # the target model's, as memory_usage.weight reports it
    draft_weights_gib: float  # the draft model's when the pool is sized (its layers, its own vocabulary)
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
    # free when the weights begin to load ("Load weight begin. avail mem"): pre_model_load_gib
    # less what the scheduler allocated after measuring it
    free_before_load_gib: float = 0.0
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    profile: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    patches: list[str] = field(default_factory=list)  # the image's patches the plan assumed
    sglang_version: str = SGLANG_VERSION
    # what SGLang refuses or changes at start-up with this launch (startup.StartupNote.as_dict)
    startup: list[dict[str, Any]] = field(default_factory=list)
    # patch effects not yet calibrated on a real card: {patch, effect, note}
    uncalibrated: list[dict[str, Any]] = field(default_factory=list)
    # the upper edge (upper_edge.py): what the start needs beside the pool, item by item, and
    # the highest mem-fraction-static at which it still starts on this card
    beside_pool: list[dict[str, Any]] = field(default_factory=list)
    max_mem_fraction_static: float | None = None
    upper_edge: dict[str, Any] = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        """Nothing the plan knows of stops the start ("uncalibrated": the edge is an estimate)."""
        return self.verdict != "error"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def kv_dtype_bytes(shape: ModelShape, kv_cache_dtype: str) -> tuple[str, int]:
    """mem_cache/kv_cache_dtype.py `configure_kv_cache_dtype`: "auto" is fp8 when the checkpoint's
    quantization says kv_cache_quant_algo FP8, else the model's dtype (bf16)."""
    name = kv_cache_dtype or "auto"
    if name == "auto":
        return ("fp8_e4m3", 1) if shape.kv_cache_quant_algo == "FP8" else ("bf16", 2)
    if name not in KV_DTYPE_BYTES:
        raise ValueError(
            f"kv-cache-dtype {name!r} is not modelled by the planner (known: auto, "
            + ", ".join(sorted(KV_DTYPE_BYTES))
            + ")"
        )
    return name, KV_DTYPE_BYTES[name]


def kv_cell_bytes(shape: ModelShape, *, kv_bytes: int, tp_size: int) -> tuple[int, int]:
    """(target KV bytes per token, DSA indexer bytes per token) on one GPU,
    pool_configurator.py `_compute_cell_size`."""
    layers = len(shape.full_attention_layer_ids)
    indexer = 0
    rank, rope = shape.kv_lora_rank, shape.qk_rope_head_dim
    if rank is not None:
        if rope is None:  # shape_from_config reads both; a shape built by hand may lack one
            raise ValueError(f"{shape.source}: latent (MLA) attention needs qk_rope_head_dim")
        dim = rank + rope
        if shape.dsa_index_head_dim and kv_bytes == 1:
            # calculate_mla_kv_cache_dim, FP8 with scales: latent + its fp32 block scales + bf16 rope
            dim = rank + rank // DSA_QUANT_BLOCK * 4 + rope * 2
        kv = dim * layers * kv_bytes
        if shape.dsa_index_head_dim:
            # _compute_dsa_indexer_cell_size: fp8 index keys + one fp32 scale per 128, uint8 buffer
            per = shape.dsa_index_head_dim + shape.dsa_index_head_dim // DSA_QUANT_BLOCK * 4
            indexer = per * layers
        return kv + indexer, indexer
    heads = max(1, shape.num_key_value_heads // tp_size)  # configs/model_config.py get_num_kv_heads
    return heads * (shape.head_dim + shape.v_head_dim) * layers * kv_bytes, 0


def plan_memory(
    shape: ModelShape,
    card: Card,
    inputs: PlanInputs,
    *,
    profile: str | None = None,
    overrides: dict[str, Any] | None = None,
    edge: bool = True,
) -> MemoryPlan:
    """The whole prediction for one GPU of the profile (each of `tp_size` cards holds 1/tp);
    `edge`: with the upper edge (upper_edge.py), which replans the launch at other fractions."""
    plan, pools = _plan_pools(shape, card, inputs, profile=profile, overrides=overrides)
    problems = parallel_problems(inputs, card)
    plan.problems[:0] = problems
    if edge and not problems:
        found = upper_edge(shape, card, inputs, pools, lambda other: _plan_pools(shape, card, other)[1])
        plan.beside_pool = [i.as_dict() for i in found.items]
        plan.max_mem_fraction_static = found.max_fraction
        plan.upper_edge = found.as_dict()
        if judge(found, inputs, plan.problems, plan.warnings) == "uncalibrated" and not plan.problems:
            plan.verdict = "uncalibrated"
    if plan.problems:
        plan.verdict = "error"
    return plan


@dataclass
class _Notes:
    """What a plan says beside its figures, gathered by its steps in their order."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)


@dataclass
class _Budget:
    """The memory of one GPU before the pools: measured, after the weights and the slack."""

    pre: float  # pre_model_load_memory
    weights: Weights
    slack: float
    multimodal: float
    free_before_load: float
    rest: float  # what the weights, the slack and the multimodal reservation leave the pools


def _plan_pools(
    shape: ModelShape,
    card: Card,
    inputs: PlanInputs,
    *,
    profile: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> tuple[MemoryPlan, PoolFacts]:
    """The pools at the launch's fraction (the lower edge): what plan_memory says before the
    memory beside the pool, and the exact bytes the upper edge reads. The steps: the budget the
    weights leave, the linear-attention state out of it, the KV cell and the pool's tokens, the
    running requests the pool allows."""
    tp = max(1, inputs.tp_size)
    notes = _Notes()
    release, off_release = rules_release(inputs.runtime_version)
    budget = _budget(shape, card, inputs, tp, notes, off_release)
    kv_name, kv_bytes = kv_dtype_bytes(shape, inputs.kv_cache_dtype)
    eagle = inputs.speculative in EAGLE_LIKE
    draft_tokens = (inputs.speculative_num_draft_tokens or 0) if inputs.speculative else 0
    linear, rest = _linear_state(shape, inputs, budget, draft_tokens, tp, notes)

    target_cell, indexer = kv_cell_bytes(shape, kv_bytes=kv_bytes, tp_size=tp)
    cell, draft_cell = (
        _with_draft_cell(shape, target_cell, indexer, notes.assumptions, notes.warnings)
        if eagle
        else (target_cell, 0)
    )
    # an MTP draft's pool outside the cell is allocated after this pool, beside it: the upper
    # edge holds it with the rest of what is allocated there (upper_edge.py)
    tokens = _pool_tokens(rest, cell, inputs)

    running = _max_running(tokens, inputs, linear.slots, linear.ratio)
    context = inputs.context_length
    at_context = min(running, tokens // context) if context else running
    _check_capacity(
        inputs,
        tokens=tokens,
        running=running,
        at_context=at_context,
        problems=notes.problems,
        warnings=notes.warnings,
    )
    plan = MemoryPlan(
        card=card.name,
        card_source=card.source,
        model=shape.architecture,
        gpus=tp,
        kv_cache_dtype=kv_name,
        mem_fraction_static=inputs.mem_fraction_static,
        context_length=context,
        pre_model_load_gib=_gib(budget.pre),
        weights_gib=_gib(budget.weights.target),
        draft_weights_gib=_gib(budget.weights.draft),
        slack_gib=_gib(budget.slack),
        multimodal_reserve_gib=_gib(budget.multimodal),
        state_gib=_gib(linear.state_bytes),
        spec_state_gib=_gib(linear.spec_bytes),
        kv_pool_gib=_gib(tokens * cell),
        kv_bytes_per_token=target_cell,
        kv_bytes_per_token_with_draft=cell,
        draft_kv_outside_pool_gib=_gib(tokens * draft_cell),
        free_before_load_gib=_gib(budget.free_before_load),
        state_bytes_per_request=linear.per_request,
        state_slots=linear.slots,
        state_slots_per_request=linear.ratio,
        pool_tokens=tokens,
        max_running_requests=running,
        requests_at_full_context=at_context,
        verdict="error" if notes.problems else "fits",
        problems=notes.problems,
        warnings=notes.warnings,
        assumptions=notes.assumptions,
        profile=profile,
        overrides=dict(overrides or {}),
        patches=list(inputs.patches),
        sglang_version=release,
    )
    weights = budget.weights.target + budget.weights.draft
    state = linear.state_bytes + linear.spec_bytes if linear.slots else 0
    allocated = weights + budget.multimodal + tokens * cell + state
    pools = PoolFacts(
        pool_tokens=tokens,
        max_running_requests=running,
        draft_kv=tokens * draft_cell,
        free_after_pool=budget.free_before_load - allocated,
    )
    return plan, pools


def _budget(
    shape: ModelShape, card: Card, inputs: PlanInputs, tp: int, notes: _Notes, off_release: str | None
) -> _Budget:
    """The weights on one GPU and what they, the slack and the multimodal reservation leave of
    the memory SGLang measures before loading."""
    pre = _pre_model_load(card, notes.assumptions, notes.warnings)
    if off_release:
        notes.warnings.append(off_release)
    if shape.weight_bytes is None:
        raise ValueError(
            f"{shape.source}: the checkpoint folder has no safetensors index and no "
            "*.safetensors files, so its weight size is unknown"
        )
    spec = inputs.speculative
    loaded = weights_on_gpu(
        shape, tp=tp, spec_on=spec is not None, eagle=spec in EAGLE_LIKE, effects=set(inputs.patch_effects)
    )
    notes.assumptions.extend(loaded.notes)
    slack = pre * (1 - inputs.mem_fraction_static)
    mm = inputs.vlm_cache_bytes if shape.multimodal else 0
    # the free memory at pool sizing lacks what was allocated after pre_model_load_memory was
    # measured; the slack does not
    free_before_load = pre - pre_load_allocations(shape)
    rest = free_before_load - loaded.target - loaded.draft - slack - mm
    return _Budget(pre, loaded, slack, mm, free_before_load, rest)


def _linear_state(
    shape: ModelShape, inputs: PlanInputs, budget: _Budget, draft_tokens: int, tp: int, notes: _Notes
) -> tuple[LinearState, float]:
    """A hybrid model's linear-attention state out of the budget, and what it leaves the KV pool
    (0 with a problem when nothing is left)."""
    ssm_dtype = inputs.mamba_ssm_dtype or shape.mamba_ssm_dtype or "float32"
    per_req = state_bytes_per_request(shape, ssm_dtype=ssm_dtype, tp_size=tp)
    rest = budget.rest
    if rest <= 0:
        weights = budget.weights.target + budget.weights.draft
        notes.problems.append(
            _no_room_for_kv(budget.pre, budget.free_before_load, weights, inputs.mem_fraction_static)
        )
        return LinearState(per_request=per_req), 0.0
    if not per_req:
        return LinearState(per_request=per_req), rest
    linear = plan_linear_state(shape, inputs, rest=rest, per_req=per_req, draft_tokens=draft_tokens, tp=tp)
    slots = linear.slots or 0
    if slots <= 0:
        notes.problems.append(
            f"not enough memory for the linear-attention state: {linear.slots} slots of "
            f"{per_req / MIB:.1f} MiB (SGLang refuses the start)"
        )
        linear.slots, rest = 0, 0.0
    else:
        rest = max(0.0, rest - linear.spec_bytes - linear.state_bytes)
    notes.assumptions.append(
        f"linear-attention state in {ssm_dtype} (conv state bf16), {linear.ratio} slots per "
        "running request (radix cache"
        + (" with extra buffer" if (linear.ratio or 0) > 3 else "")
        + ")"
        + (
            f"; ReplaySSM verification: a {linear.spec_bytes / MIB:.0f} MiB replay window "
            "instead of a state snapshot per draft token"
            if linear.replayssm
            else ""
        )
    )
    return linear, rest


def _pre_model_load(card: Card, assumptions: list[str], warnings: list[str]) -> float:
    """SGLang's pre_model_load_memory: what its scheduler finds free at the end of
    init_torch_distributed. From the card's total, not NVML's free memory: `up` plans while the
    serving release still holds the card, and a plan should not depend on what runs there now."""
    pre = card.memory_bytes - DRIVER_RESERVE_BYTES - TORCH_CONTEXT_BYTES
    assumptions.append(
        f"pre_model_load_memory = the card's memory - {DRIVER_RESERVE_BYTES // MIB} MiB "
        f"(driver, as on an idle H200) - {TORCH_CONTEXT_BYTES // MIB} MiB (SGLang's CUDA context and "
        "distributed init, as measured on an H200)"
    )
    if card.free_bytes is not None and card.free_bytes < pre:
        warnings.append(
            f"NVML shows {card.free_bytes / GIB:.1f} GiB free on {card.name} now: another process "
            "holds memory that SGLang would not get"
        )
    return pre


def pre_load_allocations(shape: ModelShape) -> int:
    """What SGLang's scheduler allocates between measuring pre_model_load_memory and loading the
    weights (the constants above): the forward stream, DeepGEMM's buffer, a MoE's expert map."""
    total = FORWARD_STREAM_BYTES + DEEPGEMM_BYTES
    if shape.is_moe:
        total += shape.num_hidden_layers * shape.num_experts * shape.num_experts * EXPERT_MAP_ENTRY_BYTES
    return total


def _no_room_for_kv(pre: float, free_before_load: float, weights: float, mem_fraction_static: float) -> str:
    """Why nothing is left for the KV cache, and what would help."""
    if weights >= free_before_load:  # no fraction helps: the card is too small for the weights
        return (
            f"the weights ({weights / GIB:.1f} GiB with the draft) do not fit in the "
            f"{free_before_load / GIB:.1f} GiB this card has before loading: no mem-fraction-static makes them "
            "fit; a card with more memory, or more cards (tp-size), is needed"
        )
    # _profile_available_bytes: 1 - available / pre_model_load_memory, available being what the
    # weights leave of the free memory
    minimum = 1 - (free_before_load - weights) / pre
    return (
        f"the weights ({weights / GIB:.1f} GiB with the draft) leave no memory for the KV cache "
        f"under mem-fraction-static {mem_fraction_static}: raise it above {minimum:.3f} "
        "(SGLang refuses the start with the same advice)"
    )


def _with_draft_cell(
    shape: ModelShape, target_cell: int, indexer: int, assumptions: list[str], warnings: list[str]
) -> tuple[int, int]:
    """(the pool's bytes per token, the draft's bytes per token kept outside the pool) with an
    EAGLE/MTP draft."""
    layers = len(shape.full_attention_layer_ids)
    if not (shape.draft_layers and layers):
        warnings.append("speculative decoding with a separate draft model: its own pool is not modelled")
        return target_cell, 0
    # the draft's KV has the target's per-layer size
    draft_cell = int((target_cell - indexer) * shape.draft_layers / layers) + (
        indexer // layers * shape.draft_layers if indexer else 0
    )
    if shape.nextn_layers_in_config:
        # pool_configurator.py scales the cell by the draft's layers only when
        # spec_aux_hidden_state.py found num_nextn_predict_layers in the config
        return target_cell + draft_cell, 0
    # A Qwen3.5/3.6 config says mtp_num_hidden_layers: the pool is sized on the target's cell
    # alone and the draft's pool (same tokens) comes out of the slack afterwards; measured on
    # an H200 (docs/memory.md).
    assumptions.append(
        "the MTP draft's KV pool (its layers, the pool's tokens) is allocated after the "
        "pool is sized, out of the slack (the config has no num_nextn_predict_layers)"
    )
    return target_cell, draft_cell


def _pool_tokens(rest: float, cell: int, inputs: PlanInputs) -> int:
    """The KV pool's tokens: what is left over a token's bytes, in whole pages, capped by --max-total-tokens."""
    tokens = int(rest // cell) if cell else 0
    page = max(1, inputs.page_size)
    tokens = tokens // page * page
    if inputs.max_total_tokens is not None:
        tokens = min(tokens, inputs.max_total_tokens)
    return tokens


def _check_capacity(
    inputs: PlanInputs,
    *,
    tokens: int,
    running: int,
    at_context: int,
    problems: list[str],
    warnings: list[str],
) -> None:
    """The profile's own demands on the pool: a full-context conversation, qualify's minimum of running requests."""
    context = inputs.context_length
    if inputs.require_full_context_kv and tokens < context:
        problems.append(
            f"the KV pool ({tokens:,} tokens) is smaller than one full-context conversation "
            f"({context:,} tokens)"
        )
    if running < inputs.min_running_requests:
        problems.append(
            f"SGLang would allow {running} running requests, fewer than qualify.preflight's "
            f"min_running_requests {inputs.min_running_requests}"
        )
    elif at_context < inputs.min_running_requests and not problems:
        warnings.append(
            f"only {at_context} of the {running} running requests fit at the full context length "
            f"at once ({tokens:,} tokens in the pool)"
        )


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
