"""A mounted host folder is a checkpoint, never the host's system. `model.host_path` is
bind-mounted into the server's container, and read-only does not confine it: root in the
container reads a root-owned file by its owner bits (/etc/shadow) and a mounted socket still
connects (/var/run/docker.sock is root on the host). `render` (compose and Kubernetes) refuses
such a folder at profile load, naming file, field, path and the fix; the hub cache too."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from conftest import run_cli

DIGEST = "example/sim@sha256:" + "0" * 64


def render(
    tmp_path: Path,
    host_path: str,
    *,
    k8s: bool = False,
    env: dict[str, str] | None = None,
    model: str | None = None,
):
    folder = tmp_path / "profiles"
    folder.mkdir(exist_ok=True)
    model = model or f"{{host_path: {host_path}, path: /models/sim}}"
    (folder / "mounted.yaml").write_text(f"name: mounted\nextends: sim\nmodel: {model}\n")
    out = tmp_path / ("k8s" if k8s else "c.yaml")
    flags = ("--k8s", "--qualify-image", DIGEST) if k8s else ("--cpu",)
    result = run_cli(
        "render",
        *flags,
        "--image",
        DIGEST if k8s else "x:y",
        "-o",
        str(out),
        "--profile",
        "mounted",
        "--profiles-dir",
        str(folder),
        env=env,
        timeout=120,
    )
    return result, " ".join(result.stderr.split()), out


@pytest.mark.parametrize(
    "host_path, says",
    [
        ("/var/run", "/var/run is the host's system folder"),
        ("/etc", "/etc is the host's system folder /etc"),
        ("/etc/ssl/certs", "/etc/ssl/certs is under the host's system folder /etc"),
        ("/", "/ is the host's root folder"),
        ("/var", "/var holds the host's system folder"),
        ("/var/lib/docker/volumes", "under the host's system folder /var/lib/docker"),
    ],
)
@pytest.mark.parametrize("k8s", [False, True])
def test_render_refuses_a_system_folder_as_the_checkpoint(tmp_path: Path, host_path, says, k8s):
    result, text, out = render(tmp_path, host_path, k8s=k8s)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "mounted.yaml:" in text and "model.host_path:" in text and says in text, result.stderr
    assert "point model.host_path at the checkpoint's own folder" in text
    assert not out.exists()


def test_a_link_to_a_system_folder_is_resolved(tmp_path: Path):
    link = tmp_path / "weights"
    link.symlink_to("/etc")
    result, text, out = render(tmp_path, str(link))
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"model.host_path: {link} is the host's system folder /etc" in text, result.stderr
    assert not out.exists()


def test_a_folder_holding_a_socket_is_refused(tmp_path: Path):
    runtime = tmp_path / "rt"
    runtime.mkdir()
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(runtime / "engine.sock"))
        result, text, _out = render(tmp_path, str(runtime))
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"model.host_path: {runtime} holds the socket engine.sock" in text, result.stderr


def test_a_checkpoint_folder_renders_read_only(tmp_path: Path):
    checkpoint = tmp_path / "srv" / "Qwen"
    checkpoint.mkdir(parents=True)
    (checkpoint / "config.json").write_text("{}")
    result, _, out = render(tmp_path, str(checkpoint))
    assert result.returncode == 0, result.stderr
    assert f"source: {checkpoint}" in out.read_text()


def test_the_hub_cache_is_held_to_the_same_rule(tmp_path: Path):
    result, text, out = render(tmp_path, "", env={"DEPLOYTOOL_HF_HOME": "/etc"}, model="{hub: org/name}")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "model.hub: the hub cache /etc/hub" in text and "under the host's system folder /etc" in text, (
        result.stderr
    )
    assert "DEPLOYTOOL_HF_HOME" in text
    assert not out.exists()
