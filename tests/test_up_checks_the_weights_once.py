"""An up checks the weights once: the check that identifies them (the hub commit from refs/, the
folder's fingerprint) runs while the facts are gathered, and the memory gate reads the
checkpoint's config from the folder that check found, instead of looking in the hub cache
again. Counted through real small checkpoints (tests/fake_checkpoints.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_checkpoints import write_hub_cache, write_model_folder

from deploytool.deploy.facts import gather_facts
from deploytool.deploy.no_engine import NoEngine
from deploytool.deploy.plan import UpOptions, plan_up
from deploytool.host.slots import Slot
from deploytool.profiles import ProfileStore
from deploytool.release import weights

REPO = "test-org/tiny-weights"


def _counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:
    """Every look at the weights: the check, and the listing of the weight files it makes."""
    calls: dict[str, list] = {"check_model": [], "weight_files": []}
    for name in calls:
        real = getattr(weights, name)

        def counting(*args, _real=real, _name=name, **kwargs):
            calls[_name].append(args)
            return _real(*args, **kwargs)

        monkeypatch.setattr(weights, name, counting)
    return calls


def _up(profile):
    facts = gather_facts(
        NoEngine("no engine in this test"), Slot(), profile, host_port=None, bind="127.0.0.1", publishes=False
    )
    assert facts.inputs_error is None and facts.inputs is not None and facts.inputs.model.checked
    plan_up(
        facts,
        profile,
        UpOptions(profile_name=profile.name, host_port=39125, skip_qualify=True, publishes=False),
    )
    return facts


def test_a_hub_model_is_checked_once_and_its_snapshot_read_by_the_memory_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commit = write_hub_cache(tmp_path / "hf" / "hub", REPO)
    monkeypatch.setenv("DEPLOYTOOL_HF_HOME", str(tmp_path / "hf"))
    profile = ProfileStore().get("sim").model_copy(deep=True)
    profile.model.hub, profile.model.host_path = REPO, None
    # a card from the table, so that the memory gate on the CPU slot reads the checkpoint's config
    profile.match.gpu_name = ProfileStore().get("h200-qwen3.6-35b-a3b-fp8").match.gpu_name
    calls = _counted(monkeypatch)
    facts = _up(profile)
    assert facts.inputs.model.commit == commit
    assert len(calls["check_model"]) == 1, calls["check_model"]
    assert len(calls["weight_files"]) == 1, calls["weight_files"]
    # the memory gate read the config of the snapshot the check found
    snapshot = tmp_path / "hf" / "hub" / f"models--{REPO.replace('/', '--')}" / "snapshots" / commit
    assert facts.memory is not None and facts.memory.shape is not None, facts.memory
    assert facts.memory.shape.source == str(snapshot / "config.json")


def test_a_model_folder_is_checked_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = ProfileStore().get("sim").model_copy(deep=True)
    profile.model.host_path = str(write_model_folder(tmp_path / "weights", shards=2))
    calls = _counted(monkeypatch)
    facts = _up(profile)
    assert facts.inputs.model.fingerprint.startswith("sha256:")
    assert len(calls["check_model"]) == 1, calls["check_model"]
    assert len(calls["weight_files"]) == 1, calls["weight_files"]
