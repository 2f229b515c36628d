"""The memory-bandwidth roofline of decode: how many tokens a second the card's memory allows.

A decode step reads every weight it uses once and each running request's KV (and linear-
attention state) once, so at small batch the step time is at least bytes read / bandwidth:

    bytes per step = active weights (per GPU) + c x (KV bytes per token x context
                                                     + 2 x linear-attention state)
    ceiling (tok/s per request) = bandwidth / bytes per step x accept length

Active weights: every non-expert weight (attention, linear attention, shared experts, dense
layers, the output head) plus the routed experts a step touches: for n tokens each choosing k of
E experts, E x (1 - (1 - k/E)^n) experts a layer are expected to be read (uniform routing). The
embedding table (one row a token), the vision tower and the MTP draft layers are not read by
the target's decode step; the draft's own reads are left out, so with speculative decoding the
ceiling is an upper bound. Bandwidth: NVML's bus width x max memory clock x 2, never a
measurement (docs/gpus.md shows what a copy achieves against it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .cards import Card
from .checkpoint import BYTES_PER_PARAM, ModelShape
from .plan import kv_cell_bytes, kv_dtype_bytes, state_bytes_per_request


@dataclass
class WeightSplit:
    total_bytes: float  # per GPU
    expert_bytes_per_expert_layer: float  # one routed expert of one layer, per GPU
    moe_layers: int
    experts: int
    top_k: int
    not_read_bytes: float  # embedding table, vision tower, draft layers, per GPU

    def active_bytes(self, tokens: int) -> float:
        """Weights one forward step over `tokens` tokens reads, per GPU."""
        if not self.experts:
            return self.total_bytes - self.not_read_bytes
        all_experts = self.expert_bytes_per_expert_layer * self.experts * self.moe_layers
        touched = self.experts * (1 - (1 - self.top_k / self.experts) ** max(1, tokens))
        dense = self.total_bytes - self.not_read_bytes - all_experts
        return dense + self.expert_bytes_per_expert_layer * touched * self.moe_layers


def weight_split(shape: ModelShape, *, tp_size: int = 1) -> WeightSplit:
    if shape.weight_bytes is None:
        raise ValueError(f"{shape.source}: no weight size (no safetensors index)")
    bpp = BYTES_PER_PARAM[shape.weight_precision]
    per_expert = 3 * shape.hidden_size * shape.moe_intermediate_size * bpp  # gate, up, down
    moe_layers = (shape.num_hidden_layers - shape.num_dense_layers) if shape.is_moe else 0
    embed = shape.vocab_size * shape.hidden_size * 2  # bf16 table; one row a token is read
    vision = shape.vision_params * 2
    # a draft (MTP) layer: its routed experts are most of it
    draft = shape.draft_layers * per_expert * shape.num_experts if shape.is_moe else 0
    return WeightSplit(
        total_bytes=shape.weight_bytes / tp_size,
        expert_bytes_per_expert_layer=per_expert / tp_size,
        moe_layers=moe_layers,
        experts=shape.num_experts,
        top_k=shape.num_experts_per_tok,
        not_read_bytes=(embed + vision + draft) / tp_size,
    )


@dataclass
class RooflinePoint:
    concurrency: int
    context_tokens: int
    bytes_per_step: float
    ceiling_tps_per_request: float
    measured_tps_per_request: float | None = None
    share: float | None = None  # measured / ceiling


@dataclass
class Roofline:
    card: str
    bandwidth_bytes_per_s: float
    bandwidth_source: str
    power_limit_w: float | None
    weights_read_bytes_c1: float
    kv_bytes_per_token: int
    kv_cache_dtype: str
    state_bytes_per_request: int
    accept_length: float
    points: list[RooflinePoint] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def decode_roofline(
    shape: ModelShape,
    card: Card,
    *,
    concurrencies: list[int],
    context_tokens: int,
    kv_cache_dtype: str = "auto",
    tp_size: int = 1,
    mamba_ssm_dtype: str | None = None,
    accept_length: float | None = None,
    draft_tokens: int | None = None,
) -> Roofline:
    bandwidth = card.bandwidth_bytes_per_s
    if bandwidth is None:
        raise ValueError(f"{card.name}: no memory bus width / clock, so no bandwidth to compare with")
    split = weight_split(shape, tp_size=tp_size)
    kv_name, kv_bytes = kv_dtype_bytes(shape, kv_cache_dtype)
    cell, indexer = kv_cell_bytes(shape, kv_bytes=kv_bytes, tp_size=tp_size)
    state = state_bytes_per_request(
        shape, ssm_dtype=mamba_ssm_dtype or shape.mamba_ssm_dtype or "float32", tp_size=tp_size
    )
    accept = accept_length if accept_length and accept_length > 0 else 1.0
    # with speculative decoding the target verifies draft_tokens per request each step
    tokens_per_request = draft_tokens if (draft_tokens and accept_length) else 1
    points = []
    for c in concurrencies:
        kv_read = _kv_read(shape, cell, indexer, context_tokens)
        step = split.active_bytes(c * tokens_per_request) + c * (kv_read + 2 * state)
        points.append(
            RooflinePoint(
                concurrency=c,
                context_tokens=context_tokens,
                bytes_per_step=step,
                ceiling_tps_per_request=bandwidth / step * accept,
            )
        )
    assumptions = [
        f"bandwidth {card.bandwidth_source}",
        f"weights read per step at c=1: {split.active_bytes(tokens_per_request) / 1e9:.2f} GB per GPU "
        f"({shape.weight_precision} experts at {BYTES_PER_PARAM[shape.weight_precision]:g} B/param; "
        "embedding, vision tower and MTP layers not read; experts touched by uniform top-k routing)",
        f"KV read per request per step: {cell:,} B/token ({kv_name}) x {context_tokens:,} tokens of context"
        + (", the DSA indexer keys for all of it and the latent for index_topk tokens" if indexer else ""),
    ]
    if state:
        assumptions.append(f"linear-attention state read and written per request per step: 2 x {state:,} B")
    if accept_length:
        assumptions.append(
            f"x speculative accept length {accept:.2f} (the server's avg_spec_accept_length); "
            f"the target verifies {tokens_per_request} tokens a request per step; draft reads left out"
        )
    return Roofline(
        card=card.name,
        bandwidth_bytes_per_s=bandwidth,
        bandwidth_source=card.bandwidth_source,
        power_limit_w=card.power_limit_w,
        weights_read_bytes_c1=split.active_bytes(tokens_per_request),
        kv_bytes_per_token=cell,
        kv_cache_dtype=kv_name,
        state_bytes_per_request=state,
        accept_length=accept,
        points=points,
        assumptions=assumptions,
    )


def _kv_read(shape: ModelShape, cell: int, indexer: int, context: int) -> float:
    if indexer and shape.dsa_index_topk:
        return indexer * context + (cell - indexer) * min(context, shape.dsa_index_topk)
    return cell * context


def with_measurements(roofline: Roofline, measured: dict[int, float | None]) -> Roofline:
    """Fill each point's measured per-request tok/s and its share of the ceiling."""
    for point in roofline.points:
        value = measured.get(point.concurrency)
        if value is not None:
            point.measured_tps_per_request = value
            point.share = round(value / point.ceiling_tps_per_request, 4)
    return roofline
