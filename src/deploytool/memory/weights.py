"""The weights on one GPU when SGLang sizes the KV pool: the target model's (what
`memory_usage.weight` reports) and, with an EAGLE/NEXTN draft built from the checkpoint's own
MTP layers, the draft model's, by stock SGLang or by deploytool's patches.

Stock SGLang (speculative/eagle_worker_v2.py): the draft TpModelWorker is built in
`EagleDraftWorker.__init__`, with its own embedding and LM head; `init_lm_head` ->
`set_embed_and_head` replaces them by the target's only in `alloc_memory_pool`, after the
scheduler (managers/scheduler.py `init_memory_pools`) had the target measure free memory and
size the pool, so the private copies count as used.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .cards import GIB
from .checkpoint import ModelShape


@dataclass
class Weights:
    target: float  # bytes on one GPU
    draft: float
    notes: list[str] = field(default_factory=list)


def weights_on_gpu(shape: ModelShape, *, tp: int, spec_on: bool, eagle: bool, effects: set[str]) -> Weights:
    """Target and draft bytes per GPU before the pool is sized. `effects` are the memory effects
    of the patches the image applies (patch_effects.EFFECTS) that the launch turns on."""
    assert shape.weight_bytes is not None
    source = {
        "index": "safetensors total_size",
        "files": "the safetensors files' sizes",
        "config": "estimated from config.json (no weights in the folder: --load-format dummy)",
    }.get(shape.weight_source or "index", "safetensors total_size")
    notes = [f"weights = {source} / tp_size"]
    target = shape.weight_bytes / tp
    rope = rope_cache_bytes(shape)
    if rope:
        # built with the model, inside the window SGLang measures as the weights' memory
        target += rope
        notes.append(
            f"+ {rope / GIB:.2f} GiB: the rotary cos/sin table, fp32 ({shape.max_position_embeddings:,} "
            f"positions x {shape.rotary_dim}), built at load"
        )
    draft = 0.0
    if shape.draft_layers:
        # models/qwen3_5.py load_weights skips every mtp.* tensor: the target never holds the
        # checkpoint's MTP layers; an EAGLE/NEXTN draft loads them into its own model.
        layers = shape.draft_layer_bytes() / tp
        target -= layers
        precision = shape.draft_precision or shape.weight_precision
        notes.append(
            f"- {layers / GIB:.2f} GiB: the checkpoint's {shape.draft_layers} MTP layer(s) in {precision}, "
            "which the target skips (estimated from the shape)"
        )
        if eagle:
            if "draft_layers_fp8" in effects and precision == "bf16":
                layers = draft_layers_fp8_bytes(shape) / tp
                notes.append(
                    f"draft layers {layers / GIB:.2f} GiB: quantized from bf16 to FP8 at load (patch)"
                )
            else:
                notes.append(f"draft layers {layers / GIB:.2f} GiB, in {precision}")
            draft += layers
            vocab = shape.vocab_bytes() / tp
            if "draft_shares_target_vocab" in effects:
                notes.append(
                    f"draft vocabulary 0 GiB: shares the target's embedding and head before the pool is "
                    f"sized (patch; stock would hold {vocab / GIB:.2f} GiB of private copies)"
                )
            else:
                draft += vocab
                notes.append(
                    f"+ {vocab / GIB:.2f} GiB: the draft's own bf16 embedding and head, loaded before the "
                    "pool is sized and shared with the target only after"
                )
    if spec_on and not eagle and shape.draft_layers:
        notes.append("a speculative algorithm other than EAGLE/NEXTN: its draft's weights are not modelled")
    return Weights(target=target, draft=draft, notes=notes)


def draft_layers_fp8_bytes(shape: ModelShape) -> int:
    """The MTP layers after SGLang's online FP8 (layers/quantization/fp8.py, not serialized):
    every linear layer and the experts at one byte per weight; `fc` (a plain nn.Linear) and the
    MoE router (built without a quantization config) stay bf16."""
    h = shape.hidden_size
    bf16 = 2 * h * h + (shape.num_experts * h if shape.is_moe else 0)
    return shape.draft_layers * ((shape.draft_layer_params() - bf16) * 1 + bf16 * 2)


def rope_cache_bytes(shape: ModelShape) -> int:
    """layers/rotary_embedding/base.py: `cos_sin_cache`, max positions x rotary dim (cos and sin
    halves), kept in fp32 on CUDA; get_rope shares one table between the layers (and the draft)."""
    return shape.max_position_embeddings * shape.rotary_dim * 4
