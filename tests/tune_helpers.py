"""The reference-runtime profile the tune tests search: its speeds answer the launch flags by
docs/sim.md's rules ("Launch flags and speed"), and the planner reads a real checkpoint config."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "tests" / "data" / "models" / "qwen3-30b-a3b"
# 100 tok/s per request, with the space's 24 output tokens (write_profile): an answer streams for
# about a quarter of a second, so a pass is short while the timing noise (a few ms) stays far under
# the ratios and margins the tests assert; eight running requests stream 800 tok/s in all, a rate
# a busy two-core machine keeps (twice that fell behind: the runtime and the client share the CPUs)
SPEED = {"max-running-requests": 2, "decode-tps": 100, "eager-decode-factor": 0.5}


# the tests answer without thinking: their requests' output tokens are the answer's alone
NO_THINKING = '{"enable_thinking": false}'


def write_profile(
    folder: Path,
    *,
    tune: dict,
    name: str = "tune-sim",
    startup: float = 0.2,
    args: dict | None = None,
    speed: dict | None = None,
    chat_template_kwargs: str | None = NO_THINKING,
) -> Path:
    """A reference-runtime profile with a checkpoint the planner reads (config, index and an
    empty shard: `up` checks that the index's shards are there). `speed` replaces SPEED;
    `chat_template_kwargs` None leaves the runtime's thinking default."""
    ckpt = folder / "ckpt"
    ckpt.mkdir(parents=True, exist_ok=True)
    for f in ("config.json", "model.safetensors.index.json"):
        (ckpt / f).write_text((MODEL / f).read_text())
    (ckpt / "model-00001-of-00001.safetensors").write_bytes(b"")
    profile = {
        "name": name,
        "match": {"gpu_name": ["h200"]},
        "image": {"recipe": "sim", "base": "deploytool/base:bookworm", "python": "3.11"},
        "model": {
            "path": "/models/sim",
            "host_path": str(ckpt),
            "served_name": "sim-model",
            "context_length": 32768,
        },
        "server": {
            "port": 30000,
            "command": ["/opt/venv/bin/python", "-m", "deploytool.sim"],
            "env": {},
            "shm_size": "1g",
            "ulimits": {},
            "args": {
                "host": "0.0.0.0",
                "port": 30000,
                "served-model-name": "sim-model",
                "context-length": 32768,
                "startup-seconds": startup,
                "prefill-tps": 200000,
                **(SPEED if speed is None else speed),
                "mem-fraction-static": 0.85,
                "cuda-graph-max-bs": 2,
                "enable-metrics": True,
                **(
                    {}
                    if chat_template_kwargs is None
                    else {"default-chat-template-kwargs": chat_template_kwargs}
                ),
                "gpu-memory-gib": 141,
                "weights-gib": 57,
                "kv-bytes-per-token": 98304,
                **(args or {}),
            },
        },
        "health": {
            "path": "/health",
            "start_period": 30,
            "start_interval": 1,
            "interval": 5,
            "timeout": 5,
            "retries": 1,
        },
        "qualify": {"preflight": {"min_running_requests": 1}},
        "tune": {
            "load": [8],
            "requests_per_level": 1,
            "output_tokens": 24,
            "repeats": 2,
            "rounds": 2,
            **tune,
        },
    }
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    return folder
