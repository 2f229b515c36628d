"""With --json every error is one JSON object on stdout and a non-zero exit; and the dry runs
that need no engine (a rollout over the slots a host's cards make, an up with explicit --gpu)
plan without one, on every stand-in host, saying what they could not know."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
HOSTS = ROOT / "tests" / "data" / "nvml-hosts"
NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}
H200, TP8, TP4 = "h200-qwen3.6-35b-a3b-fp8", "b300x8-glm5.2-nvfp4-tp8", "gb300x4-glm5.2-nvfp4-tp4"
PRO = "rtx-pro-6000-qwen3.6-35b-a3b-nvfp4"
# A one-card RTX 5090 profile that fits its card without any patch: no MTP, an FP8 KV cache
# (docs/memory.md).
T5090 = """name: t-5090
extends: rtx5090-qwen3.6-35b-a3b-nvfp4
server:
  args: {speculative-algorithm: null, speculative-num-steps: null, speculative-eagle-topk: null,
         speculative-num-draft-tokens: null, kv-cache-dtype: fp8_e4m3}
qualify: {preflight: {expect: null}}
"""
# The shipped RTX 5090 profile on stock wheels: its plan needs the image's memory patches, and
# without them the pool is short of one 256K conversation (docs/memory.md).
T5090_STOCK_WHEELS = """name: t-5090-unpatched
extends: rtx5090-qwen3.6-35b-a3b-nvfp4
image: {patches: [none]}
"""


@pytest.fixture
def hub(tmp_path: Path) -> dict[str, str]:
    """A hub cache with the three checkpoints the card profiles serve: their config and index
    from tests/data/models, and an empty file for each shard the index names."""
    for repo, folder in (
        ("nvidia/Qwen3.6-35B-A3B-NVFP4", "qwen3.6-35b-a3b-nvfp4"),
        ("Qwen/Qwen3.6-35B-A3B-FP8", "qwen3.6-35b-a3b-fp8"),
        ("nvidia/GLM-5.2-NVFP4", "glm-5.2-nvfp4"),
    ):
        commit = hashlib.sha1(repo.encode()).hexdigest()
        root = tmp_path / "hf" / "hub" / ("models--" + repo.replace("/", "--"))
        snapshot = root / "snapshots" / commit
        snapshot.mkdir(parents=True)
        for source in (ROOT / "tests" / "data" / "models" / folder).iterdir():
            (snapshot / source.name).write_bytes(source.read_bytes())
        index = json.loads((snapshot / "model.safetensors.index.json").read_text())
        for shard in set(index["weight_map"].values()):
            (snapshot / shard).write_bytes(b"")
        (root / "refs").mkdir()
        (root / "refs" / "main").write_text(commit)
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "t-5090.yaml").write_text(T5090)
    (tmp_path / "profiles" / "t-5090-unpatched.yaml").write_text(T5090_STOCK_WHEELS)
    return {
        **NO_ENGINE,
        "DEPLOYTOOL_HF_HOME": str(tmp_path / "hf"),
        "DEPLOYTOOL_PROFILES_PATH": str(tmp_path / "profiles"),
    }


def on(host: str, env: dict[str, str]) -> dict[str, str]:
    return {**env, "DEPLOYTOOL_NVML_STANDIN": str(HOSTS / f"{host}.yaml")}


@pytest.mark.parametrize(
    "host, profile, slots",
    [
        ("rtx5090x2", "t-5090", [["GPU-5090a001"], ["GPU-5090b002"]]),
        ("b300x8", TP8, [[f"GPU-b3000{i:03d}" for i in range(8)]]),
        ("gb300x4", TP4, [[f"GPU-6b30000{i}" for i in range(4)]]),
        ("h200x2-pcie-switch", H200, [["GPU-a2000001"], ["GPU-a2000002"]]),
        ("mixed-5090-pro6000", PRO, [["GPU-60000004"]]),
        ("h200-mig", H200, [["GPU-a2000002"]]),
    ],
)
def test_rollout_all_gpus_dry_run_on_every_host_needs_no_engine(hub, host, profile, slots):
    out = run_cli("rollout", "--all-gpus", "--profile", profile, "--dry-run", "--json", env=on(host, hub))
    assert out.returncode == 0, out.stdout + out.stderr
    plan = json.loads(out.stdout)["plan"]
    planned = [
        [
            uuid[:12]
            for uuid in p["compose"]["services"]["server"]["deploy"]["resources"]["reservations"]["devices"][
                0
            ]["device_ids"]
        ]
        for p in plan["slots"]
    ]
    assert planned == slots
    assert plan["canary"] == plan["waves"][0][0] and [w for wave in plan["waves"] for w in wave] == [
        p["slot"] for p in plan["slots"]
    ]
    assert all(any(w.startswith("no Docker engine answers (") for w in p["warnings"]) for p in plan["slots"])
    assert not any("is reachable" in w for p in plan["slots"] for w in p["warnings"])  # the reason, said once
    assert all(p["serving"] is None and p["release"] == 1 for p in plan["slots"])
    if host in ("h200-mig", "mixed-5090-pro6000"):  # slots that fit only with less memory: named, not taken
        assert any("not taken by --all-gpus" in w for w in plan["warnings"])


def test_a_refused_dry_run_without_an_engine_is_a_json_error(hub):
    # the memory plan refuses it on the card, engine or not
    out = run_cli(
        "rollout",
        "--all-gpus",
        "--profile",
        "t-5090-unpatched",
        "--dry-run",
        "--json",
        env=on("rtx5090x2", hub),
    )
    assert out.returncode == 1
    error = json.loads(out.stdout)["error"]
    assert error["kind"] == "MemoryRefused"
    assert error["exit_code"] == 1 and error["hint"]


def test_up_and_rollout_dry_runs_with_explicit_gpus_need_no_engine(hub):
    env = on("h200x2-pcie-switch", hub)
    gpus = json.loads(run_cli("gpus", "--json", env=env).stdout)["gpus"]
    a, b = (g["uuid"] for g in gpus)
    up = run_cli("up", "--gpu", a, "--profile", H200, "--port", "39217", "--dry-run", "--json", env=env)
    assert up.returncode == 0, up.stdout + up.stderr
    assert json.loads(up.stdout)["plan"]["release"] == 1
    rollout = run_cli("rollout", "--gpu", a, "--gpu", b, "--profile", H200, "--dry-run", "--json", env=env)
    assert rollout.returncode == 0, rollout.stdout + rollout.stderr
    assert json.loads(rollout.stdout)["plan"]["waves"] == [[f"gpu-{a[4:12]}"], [f"gpu-{b[4:12]}"]]
    # a real run on the described host's cards is refused before the engine is asked, as JSON
    real = run_cli("rollout", "--gpu", a, "--profile", H200, "--json", env=env)
    assert real.returncode == 2 and "the host is described by" in json.loads(real.stdout)["error"]["message"]
    # and on this host's own NVML it needs the engine, and says so as JSON
    real = run_cli(
        "rollout", "--gpu", a, "--profile", H200, "--json", env={**env, "DEPLOYTOOL_NVML_STANDIN": ""}
    )
    assert real.returncode == 3 and json.loads(real.stdout)["error"]["kind"] == "EngineUnavailable"


@pytest.mark.parametrize(
    "args, code, kind",
    [
        (["gpus", "--json", "--no-such-option"], 2, "UsageError"),
        (["bench", "--json", "--url", "http://127.0.0.1:9", "--repeats", "many"], 2, "UsageError"),
        (["profiles", "show", "--profile", "no-such-profile", "--json"], 2, "ProfileError"),
        (["slots", "--profile", H200, "--json"], 4, "NoGpuError"),
        (["status", "--json"], 3, "EngineUnavailable"),
        (["rollout", "--dry-run", "--json"], 2, "UsageError"),
        (["compare", "--json", "--cpu-slot", "a"], 2, "UsageError"),
    ],
)
def test_every_json_command_reports_its_error_as_json_on_stdout(args, code, kind):
    out = run_cli(*args, env=on("no-driver", NO_ENGINE))  # nvmlInit fails: no card to slot
    assert out.returncode == code, out.stdout + out.stderr
    body = json.loads(out.stdout)
    assert body["error"]["kind"] == kind and body["error"]["exit_code"] == code and body["error"]["message"]
    assert out.stderr.strip()  # a person watching still reads it
    assert "Traceback" not in out.stderr


def test_without_json_an_error_is_text_on_stderr_only():
    out = run_cli("profiles", "show", "--profile", "no-such-profile", env=dict(os.environ))
    assert out.returncode == 2 and out.stdout == "" and "no-such-profile" in out.stderr


def test_a_slot_with_more_cards_than_the_profile_uses_is_refused(hub):
    """Every card of a slot is reserved for its server: a one-card profile on two would hold
    one idle."""
    env = on("h200x2-pcie-switch", hub)
    a, b = (g["uuid"] for g in json.loads(run_cli("gpus", "--json", env=env).stdout)["gpus"])
    for args in (["up", "--gpu", a, "--gpu", b, "--port", "39217"], ["rollout", "--gpu", f"{a},{b}"]):
        out = run_cli(*args, "--profile", H200, "--dry-run", "--json", env=env)
        assert out.returncode == 2, out.stdout + out.stderr
        error = json.loads(out.stdout)["error"]
        assert error["kind"] == "UsageError" and f"profile {H200} uses 1 GPU, slot gpu-" in error["message"]
        assert f"deploytool slots --profile {H200}" in error["hint"]
