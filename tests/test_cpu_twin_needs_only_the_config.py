"""cpu-twin reads only the checkpoint's config.json (its probe does, where the runtime looks): a
hub snapshot holding config.json and no weights gets the twin past the plan's checks, where `up`
refuses for the missing weights; the plan's warning says so."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from conftest import run_cli

NAME, HUB = "h200-qwen3.6-35b-a3b-fp8", "Qwen/Qwen3.6-35B-A3B-FP8"
DATA = Path(__file__).resolve().parent / "data"
CARD = "GPU-902fbb9d-b99b-972e-6fe3-7af41ed2314c"  # the lent H200 of h200-lent.yaml


def test_a_config_without_weights_is_enough_for_the_twin(tmp_path: Path, docker_engine) -> None:
    commit = hashlib.sha1(HUB.encode()).hexdigest()
    root = tmp_path / "hf" / "hub" / ("models--" + HUB.replace("/", "--"))
    (root / "snapshots" / commit).mkdir(parents=True)
    (root / "snapshots" / commit / "config.json").write_bytes(
        (DATA / "models" / "qwen3.6-35b-a3b-fp8" / "config.json").read_bytes()
    )  # config.json alone
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(commit)
    env = {
        "DEPLOYTOOL_NVML_STANDIN": str(DATA / "nvml-hosts" / "h200-lent.yaml"),
        "DEPLOYTOOL_HF_HOME": str(tmp_path / "hf"),
    }
    twin = run_cli("cpu-twin", "--gpu", CARD, "--profile", NAME, "--json", env=env)
    error = json.loads(twin.stdout)["error"]
    # past the weights: what stops it here is the release's image, which this engine has not built
    assert "is not on this engine: the twin runs the release's image" in error["message"], error
    assert "shard" not in error["message"] and "snapshot" not in error["message"]
