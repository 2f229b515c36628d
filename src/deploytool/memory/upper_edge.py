"""The plan's upper edge: what a start allocates beside the static pool, item by item, and the
highest `mem-fraction-static` at which this launch still starts on this card.

SGLang leaves `pre_model_load_memory x (1 - mem_fraction_static)` outside its static pool
(mem_cache/kv_cache_configurator.py `_profile_available_bytes`); what it allocates after the pool
must fit there, or the start dies of CUDA out-of-memory once the pool is allocated (while
capturing the CUDA graphs, or at the first prompt of a full chunk). The items, per GPU (paths
under sglang/srt/, read in 0.5.17 and 0.5.23):

  draft pool   an MTP draft's KV pool, allocated after the target's when the config has no
               num_nextn_predict_layers (the plan's draft_kv_outside_pool_gib): SGLang's rule,
               exact, and it grows with the pool.
  free list    the token allocator's free pages, one int64 per page of the pool, allocated with
               it (mem_cache/allocator/token.py, paged.py `clear`): SGLang's rule, exact.
  workspace    what the scheduler allocates between "Memory pool end" and the first graph
               capture (the token allocator's free lists, the attention backend's and the graph
               runners' buffers): a constant and bytes per pool token, measured on the lent H200
               (docs/measured/h200-upper-edge.md).
  graphs       the decode CUDA graphs, for each size of server_args.py
               `_generate_decode_cuda_graph_batch_sizes` up to the graph limit (capped by the
               running requests), and with EAGLE/NEXTN the target-verify, draft-decode and
               draft-extend graphs (model_executor/runner/decode_cuda_graph_runner.py, the
               "Capture ... CUDA graph end. mem usage" lines): measured.
  chunk        the activations of the largest prefill chunk (`--chunked-prefill-size`, SGLang's
               default by the card, arg_groups/memory_hook.py): measured on the tiny models,
               scaled by the model's widths (an estimate off them).
  all-reduce   NCCL and the custom all-reduce buffers with tp x pp > 1: SGLang's own allowance
               in its default fraction (server_args.py `handle_gpu_memory_settings`: tp x pp / 8
               GiB), an estimate.

The CUDA context and what the scheduler allocates before loading are not beside the pool: they
come off `pre_model_load_memory` (plan.py). Calibrated on Hopper (the lent H200: SGLang 0.5.17,
Triton attention); elsewhere the measured figures are estimates and the plan says
"uncalibrated" above the fraction that would hold them twice over.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..edge_rule import ESTIMATE, MEASURED, SGLANG_RULE, BesideItem, decode_capture_sizes, highest_fraction
from .cards import GIB, MIB, Card
from .checkpoint import ModelShape
from .default_fraction import sglang_default_mem_fraction_static
from .inputs import PlanInputs

TABLE = "docs/measured/h200-upper-edge.md"
# the token allocator's free list: one int64 per page of the pool, allocated with the pool
FREE_LIST_BYTES = 8
# Fitted on the lent H200 (SGLang 0.5.17, Triton attention; TABLE). The workspace between "Memory
# pool end" and the first capture: a constant and bytes per pool token.
WORKSPACE_BYTES = 96 * MIB
WORKSPACE_PER_TOKEN = 48.0
# a graph runner: each captured size's own graph (9 MiB: the recorded starts' "Capture ... CUDA
# graph end. mem usage" over their sizes, 72 MiB for 6 dense graphs, 368 MiB for 3 x 12 with
# MTP), and the largest size's fp32 logits over the vocabulary, which the graphs share (they are
# captured largest first into one pool: decode_cuda_graph_runner.py `_capture_one_stream`)
GRAPH_PER_SIZE = 9 * MIB
LOGIT_BYTES = 4
# the largest chunk: bytes per token per unit of the model's widths (hidden + MLP per token),
# bf16 with a few live copies: an estimate, no start has yet measured a full chunk's peak
CHUNK_PER_WIDTH = 2 * 8
# what the caching allocator cannot hand out whole (rounding, the blocks it splits): an estimate
MARGIN_BYTES = 256 * MIB


@dataclass(frozen=True)
class PoolFacts:
    """What the edge reads of the pools planned at one fraction: the exact bytes (the plan's
    JSON keeps rounded GiB) and the pool's size."""

    pool_tokens: int
    max_running_requests: int
    draft_kv: float  # an MTP draft's KV pool, allocated after the pool (0: none)
    free_after_pool: float  # free once the pool (weights, KV, state) is allocated


@dataclass
class UpperEdge:
    items: list[BesideItem]
    max_fraction: float | None  # the highest fraction that starts (None: none does)
    sure_fraction: float | None  # with every estimate doubled; == max_fraction when calibrated
    calibrated: bool
    notes: list[str] = field(default_factory=list)
    # free once the pool is allocated, and once the graphs are captured: SGLang's "Memory pool
    # end. avail mem" (the last one) and "available_gpu_mem" in its ready line
    free_after_pool: float = 0.0
    free_after_capture: float = 0.0

    def as_dict(self) -> dict:
        return {
            "items": [i.as_dict() for i in self.items],
            "needed_gib": round(self.needed / GIB, 3),
            "max_fraction": self.max_fraction,
            "sure_fraction": self.sure_fraction,
            "calibrated": self.calibrated,
            "notes": self.notes,
            "free_after_pool_gib": round(self.free_after_pool / GIB, 3),
            "free_after_capture_gib": round(self.free_after_capture / GIB, 3),
        }

    @property
    def needed(self) -> float:
        return sum(i.bytes for i in self.items)


def graph_limit(shape: ModelShape, card: Card, inputs: PlanInputs, running: int) -> int:
    """The largest decode batch SGLang captures: --cuda-graph-max-bs, else its default by the
    card (memory_hook.py), never above the running requests (base_cuda_graph_runner.py)."""
    if inputs.disable_cuda_graph:
        return 0
    limit = (
        inputs.cuda_graph_max_bs
        or sglang_default_mem_fraction_static(
            card.memory_bytes // MIB, shape, tp_size=max(1, inputs.tp_size)
        ).decode_max_bs
    )
    return max(0, min(limit, running)) if running else limit


def chunk_size(shape: ModelShape, card: Card, inputs: PlanInputs) -> int:
    return (
        inputs.chunked_prefill_size
        or sglang_default_mem_fraction_static(
            card.memory_bytes // MIB, shape, tp_size=max(1, inputs.tp_size)
        ).chunked_prefill_size
    )


def graph_bytes(sizes: list[int], tokens_per_req: int, vocab: int) -> float:
    """One graph runner: a graph per captured size, and the largest size's logits."""
    return GRAPH_PER_SIZE * len(sizes) + max(sizes, default=0) * tokens_per_req * vocab * LOGIT_BYTES


@dataclass(frozen=True)
class Beside:
    """The items beside the pool by when the start allocates them, in that order."""

    with_pool: list[BesideItem]  # by SGLang's "Memory pool end": the draft's pool, the free list
    at_capture: list[BesideItem]  # by its ready line: the workspace and the CUDA graphs
    later: list[BesideItem]  # while it serves: a chunk's activations, NCCL's buffers, the margin

    @property
    def items(self) -> list[BesideItem]:
        return [*self.with_pool, *self.at_capture, *self.later]


def beside_items(shape: ModelShape, card: Card, inputs: PlanInputs, pools: PoolFacts) -> Beside:
    """What this launch allocates beside the pool at the pools' fraction, per GPU."""
    return Beside(
        _with_pool(inputs, pools), _at_capture(shape, card, inputs, pools), _later(shape, card, inputs)
    )


def _with_pool(inputs: PlanInputs, pools: PoolFacts) -> list[BesideItem]:
    items: list[BesideItem] = []
    if pools.draft_kv:
        items.append(
            BesideItem(
                "the MTP draft's KV pool (allocated after the pool)",
                pools.draft_kv,
                SGLANG_RULE,
                "pool_configurator.py _compute_cell_size; spec_aux_hidden_state.py",
            )
        )
    pages = pools.pool_tokens // max(1, inputs.page_size)
    items.append(
        BesideItem(
            f"the token allocator's free list ({pages:,} pages x 8 B)",
            pages * FREE_LIST_BYTES,
            SGLANG_RULE,
            "mem_cache/allocator/token.py, paged.py clear(): torch.arange(...) int64",
        )
    )
    return items


def _at_capture(shape: ModelShape, card: Card, inputs: PlanInputs, pools: PoolFacts) -> list[BesideItem]:
    items = [
        BesideItem(
            f"workspace after the pool ({pools.pool_tokens:,} tokens x {WORKSPACE_PER_TOKEN:.0f} B "
            f"+ {WORKSPACE_BYTES // MIB} MiB)",
            WORKSPACE_BYTES + WORKSPACE_PER_TOKEN * pools.pool_tokens,
            MEASURED,
            TABLE,
        )
    ]
    limit = graph_limit(shape, card, inputs, pools.max_running_requests)
    if limit:
        spec = inputs.speculative is not None
        sizes = decode_capture_sizes(limit, speculative=spec)
        vocab = shape.vocab_size
        if spec:
            # the target verifies every draft token; the draft decodes and extends from the last one
            draft = inputs.speculative_num_draft_tokens or 4
            total = graph_bytes(sizes, draft, vocab) + 2 * graph_bytes(sizes, 1, vocab)
            what = (
                f"CUDA graphs: target verify, draft decode, draft extend ({len(sizes)} sizes up to {limit})"
            )
        else:
            total = graph_bytes(sizes, 1, vocab)
            what = f"decode CUDA graphs ({len(sizes)} sizes up to {limit})"
        items.append(BesideItem(what, total, MEASURED, TABLE + " (capture lines)"))
    return items


def _later(shape: ModelShape, card: Card, inputs: PlanInputs) -> list[BesideItem]:
    chunk = chunk_size(shape, card, inputs)
    tp = max(1, inputs.tp_size)
    width = shape.hidden_size + _mlp_width(shape) // tp
    items = [
        BesideItem(
            f"activations of a {chunk:,}-token chunk",
            chunk * width * CHUNK_PER_WIDTH,
            ESTIMATE,
            "hidden + MLP width per token x 16 B (bf16, a few live copies)",
        )
    ]
    if tp * max(1, inputs.pp_size) > 1:
        items.append(
            BesideItem(
                f"NCCL and custom all-reduce buffers (tp {tp} x pp {inputs.pp_size})",
                tp * max(1, inputs.pp_size) / 8 * GIB,
                ESTIMATE,
                "server_args.py handle_gpu_memory_settings: tp x pp / 8 GiB",
            )
        )
    items.append(
        BesideItem(
            "the caching allocator's margin",
            MARGIN_BYTES,
            ESTIMATE,
            "rounding and split blocks of torch's caching allocator",
        )
    )
    return items


def _mlp_width(shape: ModelShape) -> int:
    """The MLP's intermediate width one token goes through (the routed experts' and a shared
    expert's for a MoE)."""
    if shape.is_moe:
        return (shape.moe_intermediate_size or 0) * max(1, shape.num_experts_per_tok or 1) + (
            shape.shared_expert_intermediate_size or 0
        )
    return shape.intermediate_size or 4 * shape.hidden_size


def calibrated_for(shape: ModelShape, card: Card, inputs: PlanInputs) -> list[str]:
    """Why the measured figures may not hold for this launch ([]: they were measured on its kind)."""
    why = []
    if not (card.compute_capability or "").startswith("9."):
        why.append(f"the figures beside the pool were measured on an H200 (Hopper), not on {card.name}")
    if shape.is_mla:
        why.append("an MLA model's attention workspace was not measured")
    if max(1, inputs.tp_size) * max(1, inputs.pp_size) > 1:
        why.append("NCCL's buffers with several cards were not measured")
    return why


def upper_edge(
    shape: ModelShape,
    card: Card,
    inputs: PlanInputs,
    pools: PoolFacts,
    replan: Callable[[PlanInputs], PoolFacts],
) -> UpperEdge:
    """The items at the launch's fraction and the highest fraction whose rest holds them (each
    fraction replanned: the draft's pool and the workspace grow with the pool)."""
    beside = beside_items(shape, card, inputs, pools)
    items = beside.items
    elsewhere = calibrated_for(shape, card, inputs)  # the measured figures do not carry over
    estimates = [i.what for i in items if i.source == ESTIMATE]
    why = elsewhere + ([f"not measured on a real start: {', '.join(estimates)}"] if estimates else [])

    # both searches below visit the same fractions: each is planned, and its items listed, once
    planned: dict[float, tuple[float, list[BesideItem]]] = {
        inputs.mem_fraction_static: (pools.free_after_pool, items)
    }

    def at(fraction: float) -> tuple[float, list[BesideItem]]:
        if fraction not in planned:
            other = replan(replace(inputs, mem_fraction_static=fraction))
            planned[fraction] = (other.free_after_pool, beside_items(shape, card, inputs, other).items)
        return planned[fraction]

    def left(fraction: float, doubled: bool) -> float:
        free, beside = at(fraction)
        need = 0.0
        for item in beside:
            unsure = item.source == ESTIMATE or bool(elsewhere and item.source == MEASURED)
            need += item.bytes * (2 if doubled and unsure else 1)
        return free - need

    top = highest_fraction(lambda f: left(f, False))
    sure = highest_fraction(lambda f: left(f, True)) if why else top
    with_pool = sum(i.bytes for i in beside.with_pool)
    captured = sum(i.bytes for i in beside.at_capture)
    free = pools.free_after_pool
    return UpperEdge(
        items=items,
        max_fraction=top,
        sure_fraction=sure,
        calibrated=not why,
        notes=why,
        free_after_pool=free - with_pool,
        free_after_capture=free - with_pool - captured,
    )


def judge(edge: UpperEdge, inputs: PlanInputs, problems: list[str], warnings: list[str]) -> str | None:
    """The verdict the edge gives: None (fits), "uncalibrated", or a problem appended."""
    f = inputs.mem_fraction_static
    need = ", ".join(f"{i.what} {i.bytes / GIB:.2f} GiB" for i in edge.items)
    if edge.max_fraction is None or f > edge.max_fraction + 1e-9:
        top = (
            "no mem-fraction-static leaves room for it"
            if edge.max_fraction is None
            else (f"the highest mem-fraction-static that starts on this card is {edge.max_fraction:.3f}")
        )
        problems.append(
            f"mem-fraction-static {f} leaves too little beside the pool for what the start allocates "
            f"there ({need}): SGLang would die of CUDA out-of-memory after allocating the pool; {top}: "
            "lower mem-fraction-static to it, capture fewer graph batch sizes (--cuda-graph-max-bs), "
            "or a smaller --chunked-prefill-size"
        )
        return None
    if edge.sure_fraction is None or f > edge.sure_fraction + 1e-9:
        warnings.append(
            f"uncalibrated: mem-fraction-static {f} is above {edge.sure_fraction}, the fraction that "
            f"would leave twice the estimated memory beside the pool ({'; '.join(edge.notes)}); the "
            f"estimate's edge is {edge.max_fraction:.3f}, and the start may die of CUDA out-of-memory"
        )
        return "uncalibrated"
    return None
