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
from deploytool.host.slots import Slot
from deploytool.profiles import ProfileStore
from deploytool.release.compose import RenderRequest, render_compose
from deploytool.resources import package_dir

CARD = "GPU-698e6783-c3a1-e93d-9440-6334680c7c1f"


def release_document() -> dict:
    profile = ProfileStore().get("h200-qwen3.6-35b-a3b-fp8")
    return render_compose(
        RenderRequest(
            profile=profile, slot=Slot(gpus=(CARD,)), release=3, image="deploytool/sglang:h200-0123456789ab"
        )
    )


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
    # confined as the release is: the same capabilities, privileges and IPC namespace
    for key in ("image", "command", "environment", "shm_size", "ipc", "ulimits", "cap_drop", "security_opt"):
        assert server[key] == was[key], key
    assert server["cap_drop"] == ["ALL"] and server["ipc"] == "private"
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
    server = yaml.safe_load(compose_config(yaml.safe_dump(twin), project="deploytool-test-cpu-twin"))[
        "services"
    ]["server"]
    probe = (package_dir() / "image" / "in_image" / "twin_probe.py").read_text()
    assert server["entrypoint"] == [release["services"]["server"]["command"][0], "-c", probe]
    assert server["command"] == release["services"]["server"]["command"]
    assert "deploy" not in server and "ports" not in server


def test_a_busy_port_refuses_up_but_not_the_twin_which_publishes_none(tmp_path, docker_engine) -> None:
    """The twin plans the release with every check of `up` but the port's: a server of the host's
    own on the release's port (the demo's release, a person's SGLang) takes nothing from it. The
    test holds the profile's default port itself, so the answer does not depend on the host."""
    import hashlib
    import json

    from conftest import hold_port, run_cli

    name, hub = "h200-qwen3.6-35b-a3b-fp8", "Qwen/Qwen3.6-35B-A3B-FP8"
    files = package_dir().parents[1] / "tests" / "data" / "models" / "qwen3.6-35b-a3b-fp8"
    commit = hashlib.sha1(hub.encode()).hexdigest()
    root = tmp_path / "hf" / "hub" / ("models--" + hub.replace("/", "--"))
    snapshot = root / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for source in files.iterdir():
        (snapshot / source.name).write_bytes(source.read_bytes())
    for shard in set(
        json.loads((snapshot / "model.safetensors.index.json").read_text())["weight_map"].values()
    ):
        (snapshot / shard).write_bytes(b"")
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(commit)
    hosts = package_dir().parents[1] / "tests" / "data" / "nvml-hosts"
    card = "GPU-902fbb9d-b99b-972e-6fe3-7af41ed2314c"  # the lent H200 of h200-lent.yaml
    env = {
        "DEPLOYTOOL_NVML_STANDIN": str(hosts / "h200-lent.yaml"),
        "DEPLOYTOOL_HF_HOME": str(tmp_path / "hf"),
    }
    port = ProfileStore().get(name).server.port
    with hold_port(port):
        up = run_cli("up", "--gpu", card, "--profile", name, "--dry-run", "--json", env=env)
        assert up.returncode == 1, up.stdout + up.stderr
        assert f"port {port} on 127.0.0.1 is already in use" in json.loads(up.stdout)["error"]["message"]
        twin = run_cli("cpu-twin", "--gpu", card, "--profile", name, "--json", env=env)
    # past every check of the plan, the port's too: what stops it is the image it would run,
    # which this engine has not built (the twin runs the release's own image)
    error = json.loads(twin.stdout)["error"]
    assert "already in use" not in error["message"], error
    assert "is not on this engine: the twin runs the release's image" in error["message"]
    assert f"deploytool build --profile {name}" in error["hint"]


@pytest.mark.parametrize("plugin", [False, True], ids=["no-compose-plugin", "with-the-plugin"])
def test_a_rejected_document_names_a_missing_compose_plugin_or_what_compose_said(
    tmp_path, monkeypatch: pytest.MonkeyPatch, plugin: bool
) -> None:
    """No plan asks `docker compose version` before its check any more: the check's own failure
    says which it was. A stand-in `docker` on PATH answers as the CLI does without the plugin (its
    own refusal of `compose`), or as the plugin does for a document it rejects."""
    from deploytool.errors import DeployError, EngineUnavailable

    fake = tmp_path / "bin" / "docker"
    fake.parent.mkdir()
    compose = (
        'if [ "$2" = version ]; then echo 2.40.3; exit 0; fi; echo "services.server: bad" >&2; exit 15'
        if plugin
        else "echo \"docker: 'compose' is not a docker command.\" >&2; exit 1"
    )
    fake.write_text(f'#!/bin/sh\nif [ "$1" = compose ]; then {compose}; fi\nexit 1\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    expected = (
        (DeployError, "(?s)docker compose rejected .*services.server: bad")
        if plugin
        else (
            EngineUnavailable,
            "the docker compose v2 plugin is missing .docker said: docker: .compose. is not a docker command",
        )
    )
    with pytest.raises(expected[0], match=expected[1]):
        compose_config("services: {server: {image: x}}\n", project="p")
