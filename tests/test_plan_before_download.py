"""Plan before you download: every shipped card profile carries its model's config.json and
safetensors index (kilobytes), so plan-memory, up --dry-run, slots and profiles list answer on
a machine with no weights; the weights are needed only to start."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_cli

from deploytool.profiles import ProfileStore

ROOT = Path(__file__).resolve().parents[1]
HOSTS = ROOT / "tests" / "data" / "nvml-hosts"
H200 = "h200-qwen3.6-35b-a3b-fp8"


def no_weights(tmp_path: Path, host: str = "h200x2-pcie-switch") -> dict[str, str]:
    return {
        "DOCKER_HOST": "unix:///nonexistent/docker.sock",
        "DEPLOYTOOL_HF_HOME": str(tmp_path / "empty-hf"),
        "DEPLOYTOOL_NVML_STANDIN": str(HOSTS / f"{host}.yaml"),
    }


def test_every_shipped_card_profile_carries_the_config_the_planner_reads():
    store = ProfileStore()
    for profile in store.all():
        if profile.is_simulator or profile.image.recipe != "sglang" or not profile.match.gpu_name:
            continue
        folder = Path(profile.model.config or "")
        assert (folder / "config.json").is_file() and (folder / "model.safetensors.index.json").is_file(), (
            profile.name
        )
        assert sum(f.stat().st_size for f in folder.iterdir()) < 64 * 1024  # kilobytes, no weights
        # the same files the planner's tests are held against
        twin = ROOT / "tests" / "data" / "models" / folder.name
        for name in ("config.json", "model.safetensors.index.json"):
            assert (folder / name).read_bytes() == (twin / name).read_bytes(), (profile.name, name)


def test_plan_memory_profiles_list_slots_and_a_dry_run_need_no_weights(tmp_path):
    env = no_weights(tmp_path)
    plan = run_cli("plan-memory", "--profile", H200, env=env)
    assert plan.returncode == 0, plan.stderr
    assert "planned from the config the profile carries" in plan.stdout
    listed = {
        r["name"]: r["memory"]
        for r in json.loads(run_cli("profiles", "list", "--json", env=env).stdout)["profiles"]
    }
    assert listed[H200]["verdict"] == "fits"
    slots = run_cli("slots", "--profile", H200, "--json", env=env)
    assert slots.returncode == 0 and json.loads(slots.stdout)["slots"]
    gpu = json.loads(run_cli("gpus", "--json", env=env).stdout)["gpus"][0]["uuid"]
    dry = run_cli("up", "--gpu", gpu, "--profile", H200, "--port", "39217", "--dry-run", env=env)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "the weights are not here, so a real `up` refuses" in dry.stdout
    assert "checked: memory plan on NVIDIA H200 NVL" in dry.stdout and "(fits)" in dry.stdout


def test_plan_memory_without_any_config_says_how_to_get_one(tmp_path):
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "bare.yaml").write_text(f"name: bare\nextends: {H200}\nmodel: {{config: null}}\n")
    proc = run_cli(
        "plan-memory", "--profile", "bare", "--profiles-dir", str(profiles), env=no_weights(tmp_path)
    )
    assert proc.returncode == 2
    assert "hf download Qwen/Qwen3.6-35B-A3B-FP8 config.json model.safetensors.index.json" in proc.stderr
    assert "--checkpoint DIR" in proc.stderr
