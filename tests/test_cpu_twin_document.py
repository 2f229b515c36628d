"""A GPU release's CPU twin document (deploy/cpu_twin.py): the release's compose document with
what needs a card taken out, and nothing else changed, as the compose plugin reads it. Its run
on the engine is tested with a fork's image in test_fork_image.py."""

from __future__ import annotations

import copy
import shutil

import pytest
import yaml

from deploytool.deploy.cpu_twin import twin_document
from deploytool.host import labels
from deploytool.host.engine import compose_config, compose_plugin_version
from deploytool.profiles import ProfileStore
from deploytool.release.compose import RenderRequest, render_compose
from deploytool.release.slots import Slot
from deploytool.resources import package_dir

CARD = "GPU-698e6783-c3a1-e93d-9440-6334680c7c1f"


def release_document() -> dict:
    profile = ProfileStore().get("h200-qwen3.6-35b-a3b-fp8")
    return render_compose(RenderRequest(profile=profile, slot=Slot(gpus=(CARD,)), release=3,
                                        image="deploytool/sglang:h200-0123456789ab"))


def test_the_twin_takes_out_what_needs_a_card_and_keeps_the_rest():
    release = release_document()
    twin, changes = twin_document(release, project=release["name"] + "-cpu-twin")
    server, was = twin["services"]["server"], release["services"]["server"]
    assert "deploy" not in server and "ports" not in server and "volumes" not in twin
    assert f"no GPU reservation (the release reserves {CARD})" in changes
    assert server["restart"] == "no" and server["healthcheck"] == {"disable": True}
    assert server["labels"] == {labels.INSTANCE: labels.instance(), labels.CPU_TWIN: release["name"]}
    assert labels.MANAGED not in server["labels"]  # never a release to status, rollback or prune
    assert server["volumes"][0] == {"type": "tmpfs", "target": "/cache"}
    assert server["volumes"][1:] == was["volumes"][1:]  # the weights' mount as the release has it
    for key in ("image", "command", "environment", "shm_size", "ipc", "ulimits"):
        assert server[key] == was[key], key
    assert server["entrypoint"][:2] == [was["command"][0], "-c"]
    assert "deploy" in release["services"]["server"] and "ports" in was  # the release's document is untouched

    # only the card goes: a limit beside the reservation stays as the release has it
    limited = copy.deepcopy(release)
    limited["services"]["server"]["deploy"]["resources"]["limits"] = {"memory": "64g"}
    kept, _ = twin_document(limited, project="p")
    assert kept["services"]["server"]["deploy"] == {"resources": {"limits": {"memory": "64g"}}}

    other, changes = twin_document(release, project="p", image="deploytool/sglang:other")
    assert other["services"]["server"]["image"] == "deploytool/sglang:other"
    assert f"image deploytool/sglang:other instead of {was['image']}" in changes


@pytest.mark.skipif(shutil.which("docker") is None, reason="no docker CLI")
def test_compose_reads_the_twin_with_the_probe_and_the_command_unchanged():
    if compose_plugin_version() is None:
        pytest.skip("the docker compose v2 plugin is missing")
    release = release_document()
    twin, _ = twin_document(release, project="deploytool-test-cpu-twin")
    server = yaml.safe_load(compose_config(yaml.safe_dump(twin), project="deploytool-test-cpu-twin"))["services"]["server"]
    probe = (package_dir() / "image" / "in_image" / "twin_probe.py").read_text()
    assert server["entrypoint"] == [release["services"]["server"]["command"][0], "-c", probe]
    assert server["command"] == release["services"]["server"]["command"]
    assert "deploy" not in server and "ports" not in server
