"""Small fake checkpoints the tests write: a model folder (config.json + a real, tiny
safetensors file) and a huggingface_hub cache with the hub's layout (blobs, snapshots, refs)."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 8,
    "num_hidden_layers": 1,
    "num_attention_heads": 1,
    "vocab_size": 16,
}


def safetensors_bytes(tensors: dict[str, list[float]]) -> bytes:
    """The safetensors format: an 8-byte little-endian header length, a JSON header, the data."""
    header, data, offset = {}, b"", 0
    for name, values in tensors.items():
        raw = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": [len(values)], "data_offsets": [offset, offset + len(raw)]}
        data += raw
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def write_model_folder(folder: Path, *, shards: int = 1, config: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config or CONFIG))
    if shards == 1:
        (folder / "model.safetensors").write_bytes(safetensors_bytes({"w": [1.0, 2.0]}))
        return folder
    weight_map = {}
    for i in range(1, shards + 1):
        name = f"model-{i:05d}-of-{shards:05d}.safetensors"
        (folder / name).write_bytes(safetensors_bytes({f"layer{i}.w": [float(i)]}))
        weight_map[f"layer{i}.w"] = name
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )
    return folder


def write_hub_cache(cache: Path, repo: str, *, revision: str = "main", seed: str = "one") -> str:
    """A hub cache holding `repo` at `revision`, as `hf download` leaves it; returns the commit."""
    commit = hashlib.sha1(f"{repo}@{seed}".encode()).hexdigest()
    root = cache / ("models--" + repo.replace("/", "--"))
    snapshot = root / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    (root / "blobs").mkdir(exist_ok=True)
    for name, content in (
        ("config.json", json.dumps(CONFIG).encode()),
        ("model.safetensors", safetensors_bytes({"w": [3.0]})),
    ):
        blob = hashlib.sha256(content).hexdigest()
        (root / "blobs" / blob).write_bytes(content)
        link = snapshot / name
        if not link.exists():
            os.symlink(f"../../blobs/{blob}", link)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / revision).write_text(commit)
    return commit
