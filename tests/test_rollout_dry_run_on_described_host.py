"""docs/gpus.md's `rollout --all-gpus --dry-run` on a described host, with a Docker engine that
answers (the docs suite runs it with none): slots without a release yet are planned and said to
be refused by a real rollout, as a dry run says of the weights not yet here, instead of the
dry run refusing (exit 2) before showing anything. A real rollout still refuses."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import free_port, run_cli

HOSTS = Path(__file__).resolve().parent / "data" / "nvml-hosts"


def test_rollout_dry_run_on_a_described_host_plans_slots_without_a_release(
    docker_engine, tmp_path: Path
) -> None:
    # the card profile on a free port: another process on this machine may hold its default 30000
    (tmp_path / "h200-free-port.yaml").write_text(
        f"name: h200-free-port\nextends: h200-qwen3.6-35b-a3b-fp8\nserver:\n  port: {free_port()}\n"
    )
    env = {
        "DEPLOYTOOL_NVML_STANDIN": str(HOSTS / "h200x2-pcie-switch.yaml"),
        "DEPLOYTOOL_HF_HOME": str(tmp_path / "hf"),
    }
    args = ("rollout", "--all-gpus", "--profile", "h200-free-port", "--profiles-dir", str(tmp_path))
    plan = run_cli(*args, "--dry-run", env=env)
    assert plan.returncode == 0, plan.stderr
    assert "engine" not in plan.stdout.split("wave 1")[0]  # planned with the engine's facts, not without one
    for slot in ("gpu-a2000001", "gpu-a2000002"):
        assert (
            f"warning: slot {slot} has no release yet, so no port of its own: a real rollout refuses it"
            in plan.stdout
        ), plan.stdout
        assert f"up on slot {slot}: serving now nothing, would make release 1" in plan.stdout
    doc = json.loads(run_cli(*args, "--dry-run", "--json", env=env).stdout)
    assert [p["slot"] for p in doc["plan"]["slots"]] == ["gpu-a2000001", "gpu-a2000002"]
    real = run_cli(*args, env=env)
    assert real.returncode != 0 and "described" in real.stderr, (
        real.stderr
    )  # its cards are not this machine's
