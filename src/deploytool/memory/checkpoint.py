"""What the memory planner needs from a checkpoint folder: `config.json` and the safetensors
index, read the way SGLang 0.5.23 reads them.

Only the shape of the model is read (layer counts, heads, the linear-attention state, the
draft layers, the precision), never a weight. A vision-language checkpoint keeps the language
model under `text_config`; SGLang reads it from there too (configs/model_config.py,
`hf_text_config`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError

# Bytes one parameter takes, by the checkpoint's precision. NVFP4 packs two 4-bit values in a
# byte and keeps one FP8 scale per 16 values (ModelOpt's layout): 0.5 + 1/16.
BYTES_PER_PARAM = {
    "bf16": 2.0,
    "fp16": 2.0,
    "fp32": 4.0,
    "fp8": 1.0,
    "nvfp4": 0.5 + 1 / 16,
    "mxfp4": 0.5 + 1 / 32,
}


@dataclass
class ModelShape:
    """The parts of a checkpoint's config that size its memory."""

    source: str  # the config.json read
    architecture: str
    model_type: str
    num_hidden_layers: int
    hidden_size: int
    vocab_size: int
    # attention
    num_key_value_heads: int
    head_dim: int
    v_head_dim: int
    full_attention_layer_ids: list[int]
    # MLA (DeepSeek-style latent attention): per-token latent + rope, replicated across TP
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    dsa_index_head_dim: int | None = None  # DeepSeek sparse attention's indexer keys
    dsa_index_topk: int | None = None  # tokens whose latent a DSA decode step reads
    # Gated-DeltaNet / Mamba2-style linear attention (a hybrid model)
    linear_attention_layer_ids: list[int] = field(default_factory=list)
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0
    mamba_ssm_dtype: str | None = None  # the config's own choice, when it states one
    # next-token-prediction (MTP) layers shipped in the checkpoint: the draft of NEXTN/EAGLE
    draft_layers: int = 0
    draft_precision: str | None = None  # bf16 when the quantization excludes the MTP layers, else as the bulk
    # whether the config says num_nextn_predict_layers (DeepSeek, GLM) rather than only
    # mtp_num_hidden_layers (Qwen3.5/3.6): SGLang puts the draft's KV into the pool's cell only then
    nextn_layers_in_config: bool = False
    num_attention_heads: int = 0
    attn_output_gate: bool = False  # Qwen3.5/3.6: q_proj also produces the output gate
    # MoE
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    num_dense_layers: int = 0  # leading layers with a dense MLP (DeepSeek's first_k_dense_replace)
    intermediate_size: int = 0
    tie_word_embeddings: bool = False
    # the rotary cos/sin table SGLang builds at load (layers/rotary_embedding/base.py)
    max_position_embeddings: int = 0
    rotary_dim: int = 0
    # precision and size
    weight_precision: str = "bf16"  # of the expert / linear weights: bf16, fp8, nvfp4
    kv_cache_quant_algo: str | None = (
        None  # "FP8": kv-cache-dtype auto means fp8 (mem_cache/kv_cache_dtype.py)
    )
    weight_bytes: int | None = None  # safetensors index metadata.total_size
    # where weight_bytes came from: "index" (total_size), "files" (the safetensors' sizes) or
    # "config" (no weights in the folder: estimated from the shape, as `--load-format dummy` allocates)
    weight_source: str | None = None
    multimodal: bool = False
    vision_params: int = 0  # estimated from vision_config, for the roofline (not read per token)
    vision_hidden_size: int = 0  # for SGLang's default mem-fraction-static (default_fraction.py)
    vision_num_hidden_layers: int | None = None  # as SGLang reads it: None when the config says `depth`
    # the longest context SGLang derives from the config (utils/hf_transformers/common.py
    # `get_context_length`) and the key it came from; a longer --context-length is refused
    derived_context_length: int = 2048
    derived_context_key: str | None = None

    @property
    def is_hybrid_linear(self) -> bool:
        return bool(self.linear_attention_layer_ids)

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def draft_layer_params(self) -> int:
        """Parameters of one MTP (next-token) layer: the attention projections, the routed and
        shared experts with the router (or a dense MLP) and the `fc` that joins embedding and
        hidden state. The routed experts are most of it."""
        h = self.hidden_size
        return self._attention_params() + self._mlp_params(dense=not self.is_moe) + 2 * h * h

    def draft_layer_bytes(self, precision: str | None = None) -> int:
        """Bytes of the checkpoint's MTP layers, estimated from the shape at `draft_precision`
        (or `precision`). SGLang's target model skips every `mtp.*` tensor (models/qwen3_5.py
        `load_weights`: `if "mtp" in name: continue`): these bytes are in the index's
        total_size, and on the GPU only in the draft model."""
        if not self.draft_layers:
            return 0
        chosen = precision or self.draft_precision or self.weight_precision
        return int(self.draft_layers * self.draft_layer_params() * BYTES_PER_PARAM[chosen])

    def vocab_bytes(self) -> int:
        """The bf16 input embedding and output head (one matrix when tied)."""
        return self.vocab_size * self.hidden_size * 2 * (1 if self.tie_word_embeddings else 2)

    def _attention_params(self) -> int:
        h = self.hidden_size
        q_dim = self.num_attention_heads * self.head_dim
        return (
            q_dim * h * (2 if self.attn_output_gate else 1)
            + 2 * self.num_key_value_heads * self.head_dim * h
            + q_dim * h
        )

    def _linear_attention_params(self) -> int:
        """One Gated-DeltaNet layer (models/qwen3_5.py `Qwen3_5GatedDeltaNet`): in_proj_qkvz,
        in_proj_ba, the depthwise conv, out_proj (dt_bias, A_log and the norm are a few hundred)."""
        h = self.hidden_size
        key = self.linear_num_key_heads * self.linear_key_head_dim
        value = self.linear_num_value_heads * self.linear_value_head_dim
        return (
            (2 * key + 2 * value) * h
            + 2 * self.linear_num_value_heads * h
            + (2 * key + value) * self.linear_conv_kernel_dim
            + value * h
        )

    def _mlp_params(self, *, dense: bool) -> int:
        h = self.hidden_size
        if dense:
            return 3 * h * self.intermediate_size
        return (
            self.num_experts * 3 * h * self.moe_intermediate_size
            + 3 * h * self.shared_expert_intermediate_size
            + self.num_experts * h
        )

    def estimated_weight_bytes(self) -> int:
        """What the checkpoint's weights take, from the shape alone: the target's layers (the
        attention or linear-attention mixer and the MLP of each), the embedding and head, and
        the MTP layers, as in an index's total_size. For a folder without weights, served with
        `--load-format dummy`, where SGLang allocates exactly these parameters at the config's
        dtype (norms, biases and rotary tables, well under 0.1%, are left out)."""
        if self.is_mla:
            raise UsageError(
                f"{self.source}: no safetensors index or files beside it, and the weight estimate "
                "from the config does not cover latent (MLA) attention",
                hint="put the checkpoint's model.safetensors.index.json in the folder",
            )
        linear_bytes = BYTES_PER_PARAM[self.weight_precision]
        linear = set(self.linear_attention_layer_ids)
        params = 0
        for layer in range(self.num_hidden_layers):
            params += self._linear_attention_params() if layer in linear else self._attention_params()
            params += self._mlp_params(dense=not self.is_moe or layer < self.num_dense_layers)
        return int(params * linear_bytes) + self.vocab_bytes() + self.draft_layer_bytes()


def read_checkpoint(folder: Path) -> ModelShape:
    """Read `config.json` (and the safetensors index, when there is one) from a checkpoint folder."""
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise UsageError(
            f"{config_path}: no config.json in the checkpoint folder",
            hint="point model.host_path at the folder that holds the model's config.json",
        )
    config = _json_object(config_path)
    # ModelOpt writes its quantization beside config.json; SGLang reads either.
    extra = folder / "hf_quant_config.json"
    if extra.is_file() and not config.get("quantization_config"):
        config["quantization_config"] = _json_object(extra)
    shape = shape_from_config(config, source=str(config_path))
    shape.weight_bytes, shape.weight_source = read_weight_bytes(folder)
    if shape.weight_bytes is None:
        shape.weight_bytes, shape.weight_source = shape.estimated_weight_bytes(), "config"
    return shape


def read_weight_bytes(folder: Path) -> tuple[int | None, str | None]:
    """The checkpoint's weight bytes and where they came from: the index's metadata.total_size
    (what the Hugging Face writer records), else the sum of the safetensors files' sizes, else
    (None, None)."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        metadata = _json_object(index).get("metadata")
        total = metadata.get("total_size") if isinstance(metadata, dict) else None
        if isinstance(total, int) and total > 0:
            return total, "index"
    files = sorted(folder.glob("*.safetensors"))
    return (sum(f.stat().st_size for f in files), "files") if files else (None, None)


def _json_object(path: Path) -> dict[str, Any]:
    """A checkpoint file's JSON object: the folder comes from outside, so a file that is not an
    object (a list, a bare string) is refused here rather than failing on its first key."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(value, dict):
        raise UsageError(
            f"{path}: expected a JSON object, got {type(value).__name__}",
            hint="point the planner at the checkpoint's own files (Hugging Face writes objects)",
        )
    return value


def _int(cfg: dict[str, Any], key: str, default: int | None = None, *, where: str) -> int:
    value = cfg.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise UsageError(
            f"{where}: field {key!r} is missing or not an integer (got {value!r})",
            hint="the memory planner reads the model's shape from config.json",
        )
    return value


# utils/hf_transformers/common.py CONTEXT_LENGTH_KEYS (0.5.17 and 0.5.23 alike): the first
# present wins, so a config with two of them is read by the earlier one
CONTEXT_LENGTH_KEYS = (
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_position_embeddings",
)


def derived_context_length(text: dict[str, Any]) -> tuple[int, str | None]:
    """SGLang's `get_context_length` on the text config: the first of CONTEXT_LENGTH_KEYS, times
    the rope scaling factor unless the scaling names original_max_position_embeddings or is
    llama3's; 2048 when the config has none of the keys."""
    # transformers 5 answers `rope_scaling` with the config's rope_parameters (SGLang reads the
    # attribute, configs/model_config.py says so)
    rope = text.get("rope_scaling") or text.get("rope_parameters")
    factor = 1.0
    if isinstance(rope, dict) and rope:
        factor = rope.get("factor", 1) or 1
        if "original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3":
            factor = 1
    for key in CONTEXT_LENGTH_KEYS:
        if text.get(key) is not None:
            return int(factor * text[key]), key
    return 2048, None


def shape_from_config(config: dict[str, Any], *, source: str = "config.json") -> ModelShape:
    nested = config.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else config
    archs = config.get("architectures") or text.get("architectures") or ["unknown"]
    layers = _int(text, "num_hidden_layers", where=source)
    heads = _int(text, "num_attention_heads", where=source)
    hidden = _int(text, "hidden_size", where=source)
    kv_heads = text.get("num_key_value_heads") or heads
    head_dim = text.get("head_dim") or hidden // heads
    full_ids, linear_ids = _layer_kinds(text, layers)
    shape = ModelShape(
        source=source,
        architecture=archs[0],
        model_type=str(config.get("model_type", text.get("model_type", ""))),
        num_hidden_layers=layers,
        hidden_size=hidden,
        vocab_size=_int(text, "vocab_size", where=source),
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=text.get("v_head_dim") or head_dim,
        full_attention_layer_ids=full_ids,
        linear_attention_layer_ids=linear_ids,
        tie_word_embeddings=bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
        intermediate_size=text.get("intermediate_size") or 0,
    )
    parameters = text.get("rope_parameters")
    rope: dict[str, Any] = parameters if isinstance(parameters, dict) else {}
    partial = text.get("partial_rotary_factor") or rope.get("partial_rotary_factor") or 1.0
    shape.max_position_embeddings = int(text.get("max_position_embeddings") or 0)
    shape.derived_context_length, shape.derived_context_key = derived_context_length(text)
    shape.rotary_dim = int(head_dim * partial)
    if text.get("kv_lora_rank"):
        shape.kv_lora_rank = text["kv_lora_rank"]
        shape.qk_rope_head_dim = _int(text, "qk_rope_head_dim", where=source)
        shape.rotary_dim = shape.qk_rope_head_dim
        # MLA stores one latent per token, not per-head K and V (configs/model_config.py)
        shape.v_head_dim = text.get("v_head_dim") or head_dim
        shape.dsa_index_head_dim = text.get("index_head_dim") if text.get("index_topk") else None
        shape.dsa_index_topk = text.get("index_topk")
    if linear_ids:
        shape.linear_num_key_heads = _int(text, "linear_num_key_heads", where=source)
        shape.linear_num_value_heads = _int(text, "linear_num_value_heads", where=source)
        shape.linear_key_head_dim = _int(text, "linear_key_head_dim", where=source)
        shape.linear_value_head_dim = _int(text, "linear_value_head_dim", where=source)
        shape.linear_conv_kernel_dim = _int(text, "linear_conv_kernel_dim", where=source)
        shape.mamba_ssm_dtype = text.get("mamba_ssm_dtype")
    shape.draft_layers = int(text.get("mtp_num_hidden_layers") or text.get("num_nextn_predict_layers") or 0)
    shape.nextn_layers_in_config = text.get("num_nextn_predict_layers") is not None
    experts = text.get("num_experts") or text.get("n_routed_experts") or 0
    if experts:
        shape.num_experts = experts
        shape.num_experts_per_tok = _int(text, "num_experts_per_tok", where=source)
        shape.moe_intermediate_size = _int(text, "moe_intermediate_size", where=source)
        shared = text.get("shared_expert_intermediate_size")
        if shared is None and text.get("n_shared_experts"):
            shared = text["n_shared_experts"] * shape.moe_intermediate_size
        shape.shared_expert_intermediate_size = shared or 0
        shape.num_dense_layers = int(text.get("first_k_dense_replace") or 0)
    quant = config.get("quantization_config") or text.get("quantization_config")
    shape.weight_precision = _precision(quant)
    shape.num_attention_heads = heads
    shape.attn_output_gate = bool(text.get("attn_output_gate", False))
    shape.draft_precision = "bf16" if _excludes_mtp(quant) else None
    if isinstance(quant, dict):
        algo = quant.get("kv_cache_quant_algo") or (quant.get("quantization") or {}).get(
            "kv_cache_quant_algo"
        )
        shape.kv_cache_quant_algo = str(algo).upper() if algo else None
    vision = config.get("vision_config")
    if isinstance(vision, dict):
        shape.multimodal = True
        shape.vision_params = _vision_params(vision)
        shape.vision_hidden_size = int(vision.get("hidden_size") or 0)
        shape.vision_num_hidden_layers = vision.get("num_hidden_layers")
    return shape


def _layer_kinds(text: dict[str, Any], layers: int) -> tuple[list[int], list[int]]:
    """Full-attention and linear-attention layer ids. `layer_types` when the config lists them
    (Qwen3.5/3.6), else `full_attention_interval` (Qwen3-Next: layer i is full attention when
    (i + 1) % interval == 0, configs/qwen3_next.py), else every layer is full attention."""
    types = text.get("layer_types")
    if isinstance(types, list) and len(types) == layers:
        full = [i for i, t in enumerate(types) if t in ("full_attention", "attention")]
        linear = [i for i, t in enumerate(types) if t in ("linear_attention", "mamba")]
        return full, linear
    interval = text.get("full_attention_interval")
    if interval and text.get("linear_num_value_heads"):
        full = [i for i in range(layers) if (i + 1) % interval == 0]
        return full, [i for i in range(layers) if (i + 1) % interval != 0]
    return list(range(layers)), []


def _precision(quant: Any) -> str:
    """The precision of the bulk (expert / linear) weights from quantization_config."""
    if not isinstance(quant, dict):
        return "bf16"
    method = str(quant.get("quant_method", "")).lower()
    algo = str(quant.get("quant_algo", "") or (quant.get("quantization") or {}).get("quant_algo", "")).upper()
    if "NVFP4" in algo or method in ("modelopt_fp4", "nvfp4"):
        return "nvfp4"
    if "MXFP4" in algo or method == "mxfp4":
        return "mxfp4"
    if "FP8" in algo or method in ("fp8", "modelopt_fp8") or quant.get("fmt") == "e4m3":
        return "fp8"
    if method == "compressed-tensors":
        groups = quant.get("config_groups") or {}
        bits = {g.get("weights", {}).get("num_bits") for g in groups.values() if isinstance(g, dict)}
        return "nvfp4" if 4 in bits else "fp8" if 8 in bits else "bf16"
    return "bf16"


def _excludes_mtp(quant: Any) -> bool:
    """Whether the quantization leaves the MTP layers unquantized: ModelOpt's `exclude_modules`
    (at the top or under `quantization`) or compressed-tensors' `ignore` names them."""
    if not isinstance(quant, dict):
        return False
    names = list(quant.get("exclude_modules") or []) + list(quant.get("ignore") or [])
    names += list((quant.get("quantization") or {}).get("exclude_modules") or [])
    return any("mtp" in str(name) for name in names)


def _vision_params(vision: dict[str, Any]) -> int:
    """A ViT's parameters, about: per block 4 h^2 (attention) + 2 h i (MLP)."""
    depth = vision.get("depth") or vision.get("num_hidden_layers") or 0
    h = vision.get("hidden_size") or 0
    i = vision.get("intermediate_size") or 4 * h
    return int(depth * (4 * h * h + 2 * h * i))
