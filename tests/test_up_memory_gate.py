"""`up` runs the memory plan before it stops anything: on the reference runtime (real Docker
engine, real compose) with a fake checkpoint folder (config.json, safetensors index, a tiny
shard under the indexed name) and the profile's card from the table, a plan that does not fit is refused while the
serving release keeps serving; --skip-memory-plan starts anyway and the journal says so."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
from conftest import free_port, run_cli
from fake_checkpoints import safetensors_bytes
from lifecycle_helpers import health_check, remove_instance

pytestmark = pytest.mark.docker

MODELS = Path(__file__).parent / "data" / "models"


@pytest.fixture
def gate_env(docker_engine, tmp_path: Path):
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    for name in ("config.json", "model.safetensors.index.json"):
        shutil.copy(MODELS / "qwen3-30b-a3b" / name, checkpoint / name)
    # up checks the weights are all there: a tiny real shard under the name the index
    # gives; the memory plan reads the sizes from the index, not from the shard
    for shard in sorted(
        set(json.loads((checkpoint / "model.safetensors.index.json").read_text())["weight_map"].values())
    ):
        (checkpoint / shard).write_bytes(safetensors_bytes({"w": [0.0]}))
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    # Qwen3-30B-A3B's shape on an H200: 57 GiB of weights, 96 KiB of bf16 KV a token. The sim's
    # 262,144-token context is past the 40,960 this config derives, which SGLang allows only
    # with its override (else `up` refuses the start for that, before any pool is planned)
    (profiles / "t-mem-fits.yaml").write_text(f"""\
name: t-mem-fits
extends: sim
match: {{gpu_name: [NVIDIA H200]}}
model: {{host_path: {checkpoint}}}
server:
  args: {{startup-seconds: 0.5, decode-tps: 2000, mem-fraction-static: 0.85}}
  env: {{SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN: "1"}}
health: {health_check()}
""")
    # what-if: half the card for weights + KV leaves a pool shorter than the 262,144-token context
    (profiles / "t-mem-short.yaml").write_text("""\
name: t-mem-short
extends: t-mem-fits
server:
  args: {decode-tps: 3000, mem-fraction-static: 0.5}
""")
    port = free_port()

    def up(profile: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return run_cli(
            "up",
            "--cpu",
            "--profile",
            profile,
            "--skip-qualify",
            "--json",
            "--port",
            str(port),
            "--profiles-dir",
            str(profiles),
            *extra,
        )

    up.port = port  # type: ignore[attr-defined]
    yield up
    remove_instance(docker_engine)


def _events() -> list[dict]:
    return json.loads(run_cli("journal", "--cpu", "--json").stdout)["entries"]


def _served_decode_tps(port: int) -> float:
    return float(
        httpx.get(f"http://127.0.0.1:{port}/get_server_info", timeout=5).json()["sim_settings"]["decode_tps"]
    )


def test_up_refuses_a_profile_that_does_not_fit_before_stopping_the_serving_release(gate_env) -> None:
    first = gate_env("t-mem-fits")
    assert first.returncode == 0, first.stderr
    plans = [e for e in _events() if e["event"] == "memory_plan"]
    assert plans and plans[-1]["verdict"] == "fits" and plans[-1]["card"] == "NVIDIA H200"

    refused = gate_env("t-mem-short")
    assert refused.returncode == 1
    assert "does not fit" in refused.stderr and "nothing was stopped" in refused.stderr
    assert "smaller than one full-context conversation (262,144 tokens)" in refused.stderr
    assert "--skip-memory-plan" in refused.stderr
    assert _served_decode_tps(gate_env.port) == 2000  # release 1 still serves
    events = _events()
    assert "release.stopped" not in [e["event"] for e in events]
    assert [e for e in events if e["event"] == "memory_plan"][-1]["verdict"] == "error"

    forced = gate_env("t-mem-short", "--skip-memory-plan")
    assert forced.returncode == 0, forced.stderr
    assert _served_decode_tps(gate_env.port) == 3000
    skipped = [e for e in _events() if e["event"] == "memory_plan.skipped"]
    assert skipped and skipped[-1]["reason"] == "--skip-memory-plan" and skipped[-1]["problems"]
