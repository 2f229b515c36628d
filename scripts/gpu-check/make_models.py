"""Model folders for SGLang's `--load-format dummy`: config.json, the tokenizer, and a
`model.safetensors.index.json` whose `metadata.total_size` is what a bf16 checkpoint of these
shapes would hold (MTP layer included), so `deploytool plan-memory --checkpoint DIR` plans the
folder the server really runs. No weights: SGLang fills them at random.

usage: python make_models.py TOKENIZER_DIR OUT_ROOT
  TOKENIZER_DIR holds tokenizer.json / tokenizer_config.json / chat_template.jinja (make_tokenizer.py).

Folders:
  qwen3-tiny            dense Qwen3ForCausalLM, 2 layers: the first server, the whole deploytool run
  qwen36-tiny           Qwen3_5MoeForCausalLM: 3 Gated-DeltaNet layers + 1 gated full attention,
                        the real head sizes (256 / 128), 16 experts top-4 + a shared expert, the real
                        248,320-row vocabulary, one MTP layer (NEXTN)
  qwen36-35b-a3b-shape  the full Qwen3.5/3.6-35B-A3B text shapes (transformers' Qwen3_5MoeTextConfig
                        defaults: 40 layers, 256 experts top-8, MTP 1): a real pool on a real card
"""

from __future__ import annotations

import json
import os
import shutil
import sys

VOCAB = 248320  # Qwen3.5/3.6 embedding rows (248,044 BPE + 33 specials, padded)
EOS, PAD = 248046, 248044  # <|im_end|>, <|endoftext|>
ROPE = {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25}


def qwen35_moe_text(hidden, layers, heads, kv, lin_k, lin_v, experts, topk, moe_inter, shared_inter, mtp=1):
    return {
        "architectures": ["Qwen3_5MoeForCausalLM"],
        "model_type": "qwen3_5_moe_text",
        "vocab_size": VOCAB,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)],
        "full_attention_interval": 4,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": 256,
        "attn_output_gate": True,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_num_key_heads": lin_k,
        "linear_num_value_heads": lin_v,
        "num_experts": experts,
        "num_experts_per_tok": topk,
        "norm_topk_prob": True,
        "moe_intermediate_size": moe_inter,
        "shared_expert_intermediate_size": shared_inter,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 262144,
        "rope_theta": ROPE["rope_theta"],
        "partial_rotary_factor": 0.25,
        "rope_parameters": ROPE,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "mtp_num_hidden_layers": mtp,
        "bos_token_id": None,
        "eos_token_id": EOS,
        "pad_token_id": PAD,
        "dtype": "bfloat16",
        "torch_dtype": "bfloat16",
    }


MODELS = {
    "qwen3-tiny": {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": VOCAB,
        "hidden_size": 512,
        "intermediate_size": 1536,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 64,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        "attention_bias": False,
        "tie_word_embeddings": True,
        "use_sliding_window": False,
        "bos_token_id": None,
        "eos_token_id": EOS,
        "pad_token_id": PAD,
        "dtype": "bfloat16",
        "torch_dtype": "bfloat16",
    },
    "qwen36-tiny": qwen35_moe_text(
        hidden=512,
        layers=4,
        heads=4,
        kv=2,
        lin_k=4,
        lin_v=8,
        experts=16,
        topk=4,
        moe_inter=256,
        shared_inter=256,
    ),
    "qwen36-35b-a3b-shape": qwen35_moe_text(
        hidden=2048,
        layers=40,
        heads=16,
        kv=2,
        lin_k=16,
        lin_v=32,
        experts=256,
        topk=8,
        moe_inter=512,
        shared_inter=512,
    ),
}


def _attention(c: dict) -> int:
    h, hd = c["hidden_size"], c["head_dim"]
    q = c["num_attention_heads"] * hd * (2 if c.get("attn_output_gate") else 1)
    kv = 2 * c["num_key_value_heads"] * hd
    return h * q + h * kv + c["num_attention_heads"] * hd * h + 2 * hd  # q/k/v/o + q_norm, k_norm


def _linear_attention(c: dict) -> int:
    """One Gated-DeltaNet layer as the Hugging Face checkpoint stores it: in_proj_qkv, in_proj_z,
    in_proj_b, in_proj_a, conv1d, dt_bias, A_log, the gated norm, out_proj."""
    h = c["hidden_size"]
    k_dim = c["linear_num_key_heads"] * c["linear_key_head_dim"]
    v_dim = c["linear_num_value_heads"] * c["linear_value_head_dim"]
    heads = c["linear_num_value_heads"]
    conv_dim = 2 * k_dim + v_dim
    return (
        h * conv_dim
        + h * v_dim
        + 2 * h * heads
        + conv_dim * c["linear_conv_kernel_dim"]
        + 2 * heads
        + c["linear_value_head_dim"]
        + v_dim * h
    )


def _mlp(c: dict) -> int:
    h = c["hidden_size"]
    if c.get("num_experts"):
        return (
            c["num_experts"] * 3 * h * c["moe_intermediate_size"]
            + c["num_experts"] * h
            + 3 * h * c["shared_expert_intermediate_size"]
            + h
        )  # experts, router, shared expert, its gate
    return 3 * h * c["intermediate_size"]


def parameter_count(c: dict) -> dict[str, int]:
    """Parameters of a checkpoint of these shapes, by part (bf16 everywhere)."""
    h, layers = c["hidden_size"], c["num_hidden_layers"]
    types = c.get("layer_types") or ["full_attention"] * layers
    embed = c["vocab_size"] * h
    head = 0 if c.get("tie_word_embeddings") else c["vocab_size"] * h
    body = (
        sum(
            (_attention(c) if t == "full_attention" else _linear_attention(c)) + _mlp(c) + 2 * h
            for t in types
        )
        + h
    )
    mtp = c.get("mtp_num_hidden_layers") or 0
    # mtp.fc (2h -> h), the two pre-fc norms, one full-attention MoE decoder layer, the final norm
    draft = mtp * (2 * h * h + 2 * h + _attention(c) + _mlp(c) + 2 * h + h)
    return {
        "embedding": embed,
        "lm_head": head,
        "layers": body,
        "mtp": draft,
        "total": embed + head + body + draft,
    }


def write(tokenizer_dir: str, root: str) -> None:
    for name, cfg in MODELS.items():
        folder = os.path.join(root, name)
        os.makedirs(folder, exist_ok=True)
        cfg = {**cfg, "transformers_version": "5.12.1"}
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        with open(os.path.join(folder, "generation_config.json"), "w") as f:
            json.dump(
                {
                    "bos_token_id": None,
                    "eos_token_id": [EOS, PAD],
                    "pad_token_id": PAD,
                    "do_sample": True,
                    "temperature": 0.7,
                    "top_p": 0.8,
                    "top_k": 20,
                },
                f,
                indent=2,
            )
        counts = parameter_count(cfg)
        # the index a bf16 checkpoint of these shapes would carry; one weight_map entry, as the
        # planner reads only metadata.total_size
        with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
            json.dump(
                {
                    "metadata": {
                        "total_size": 2 * counts["total"],
                        "note": "no weights: served with --load-format dummy; total_size "
                        "is a bf16 checkpoint of these shapes (make_models.py)",
                        "parameters": counts,
                    },
                    "weight_map": {"model.embed_tokens.weight": "model-00001-of-00001.safetensors"},
                },
                f,
                indent=2,
            )
        for file in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            shutil.copy(os.path.join(tokenizer_dir, file), os.path.join(folder, file))
        print(
            f"wrote {folder}: {counts['total'] / 1e9:.3f} B parameters ({2 * counts['total'] / 2**30:.2f} GiB bf16)"
        )


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    write(sys.argv[1], sys.argv[2])
