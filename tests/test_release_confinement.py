"""A release's container gets none of the engine's loosest defaults: a private IPC namespace
with a /dev/shm of the profile's size, every capability dropped, no new privileges, a read-only
root with /tmp in memory; each loosening only where a profile asks for it with its reason, and
that reason written into the compose file. The real engine is the witness in the last test."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import run_cli
from keyed_profile import keyed
from lifecycle_helpers import release_row, slot_status, up

from deploytool.host.slots import Slot
from deploytool.profiles import ProfileStore
from deploytool.release.compose import RenderRequest, render_compose, render_text

CARD = "GPU-5f3c0a8e-1111-2222-3333-444455556666"


def _server(profile, slot: Slot | None = None) -> dict:
    return render_compose(RenderRequest(profile=profile, slot=slot or Slot(), release=1, image="x"))[
        "services"
    ]["server"]


def test_the_reference_runtime_runs_confined_with_a_read_only_root():
    server = _server(ProfileStore().get("sim"))
    assert server["cap_drop"] == ["ALL"] and "cap_add" not in server
    assert server["security_opt"] == ["no-new-privileges:true"]
    assert server["ipc"] == "private" and server["shm_size"] == "1g"
    assert server["read_only"] is True and server["tmpfs"] == ["/tmp:size=1g,mode=1777"]


def test_a_release_with_secrets_keeps_a_writable_root_and_says_why():
    # compose copies a secret into the created container's root before the start, and the engine
    # refuses that copy into a read-only root: the keyed release's root stays writable, said so
    profile = keyed(ProfileStore().get("sim"), token=False)
    req = RenderRequest(profile=profile, slot=Slot(), release=1, image="x")
    server = render_compose(req)["services"]["server"]
    assert server["secrets"] and "read_only" not in server and "tmpfs" not in server
    assert server["cap_drop"] == ["ALL"] and server["security_opt"] == ["no-new-privileges:true"]
    assert "# root file system writable, because the release carries secrets" in render_text(req)


def test_every_card_profile_keeps_a_private_ipc_and_says_why_its_root_is_writable():
    store = ProfileStore()
    cards = [p for p in store.all() if not p.abstract and not p.is_simulator]
    assert len(cards) >= 5
    for profile in cards:
        req = RenderRequest(profile=profile, slot=Slot((CARD,)), release=1, image="x")
        server = render_compose(req)["services"]["server"]
        assert server["ipc"] == "private" and server["shm_size"] == "32g", profile.name
        assert server["cap_drop"] == ["ALL"] and "cap_add" not in server, profile.name
        assert server["security_opt"] == ["no-new-privileges:true"], profile.name
        # SGLang writes outside its mounts: the exception is the profile's, with its reason in the file
        assert "read_only" not in server and "tmpfs" not in server, profile.name
        assert "# root file system writable, because SGLang writes outside its mounts" in render_text(req)


def _profiles(tmp_path: Path, server_yaml: str) -> Path:
    folder = tmp_path / "profiles"
    folder.mkdir(exist_ok=True)
    (folder / "t-loose.yaml").write_text("name: t-loose\nextends: sim\nserver:\n" + server_yaml)
    return folder


def _render(folder: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(
        "render",
        "--cpu",
        "--profile",
        "t-loose",
        "--profiles-dir",
        str(folder),
        "--image",
        "x",
        env={"DOCKER_HOST": "unix:///nonexistent.sock"},
    )


@pytest.mark.parametrize(
    "server_yaml, said",
    [
        ("  ipc: host\n", "server.ipc_reason"),
        ("  ipc_reason: shared with a sidecar\n", "ipc_reason is the reason for ipc: host"),
        ("  cap_add: {CAP_SYS_ADMIN: because}\n", "is not a Linux capability"),
        ("  cap_add: {SYS_NICE: ''}\n", "the reason must be one line"),
        ('  writable_root: "two\\nlines"\n', "the reason must be one line"),
    ],
)
def test_a_loosening_without_its_reason_is_refused_naming_the_field(
    tmp_path: Path, server_yaml: str, said: str
):
    out = _render(_profiles(tmp_path, server_yaml))
    assert out.returncode != 0 and said in out.stderr, out.stderr
    assert "t-loose" in out.stderr


def test_a_loosening_with_its_reason_is_rendered_and_the_reason_written(tmp_path: Path):
    folder = _profiles(
        tmp_path,
        "  ipc: host\n  ipc_reason: a sidecar of the host reads the queues\n"
        "  cap_add: {SYS_NICE: the scheduler pins its threads}\n"
        "  writable_root: the runtime unpacks itself at start\n",
    )
    out = _render(folder)
    assert out.returncode == 0, out.stderr
    server = yaml.safe_load(out.stdout)["services"]["server"]
    assert server["ipc"] == "host" and "shm_size" not in server  # the host's /dev/shm: unsized
    assert server["cap_drop"] == ["ALL"] and server["cap_add"] == ["SYS_NICE"]
    assert "read_only" not in server and "tmpfs" not in server
    for line in (
        "# ipc: host, because a sidecar of the host reads the queues",
        "# capability SYS_NICE added back, because the scheduler pins its threads",
        "# root file system writable, because the runtime unpacks itself at start",
    ):
        assert line in out.stdout


def test_compose_accepts_the_card_profiles_confinement(tmp_path: Path, docker_engine):
    profile = ProfileStore().get("b300x8-glm5.2-nvfp4-tp8")
    path = tmp_path / "compose.yaml"
    path.write_text(render_text(RenderRequest(profile=profile, slot=Slot((CARD,)), release=1, image="x")))
    server = yaml.safe_load(docker_engine.compose_config(path))["services"]["server"]
    assert server["cap_drop"] == ["ALL"] and server["security_opt"] == ["no-new-privileges:true"]
    assert server["ipc"] == "private" and server["shm_size"] == str(32 * 2**30)


def test_a_started_release_sees_neither_the_hosts_shared_memory_nor_a_writable_root(slot_env):
    cli = slot_env
    started = up(cli, "t-good")
    assert started.returncode == 0, started.stderr
    assert json.loads(started.stdout)["release"] == 1
    name = release_row(slot_status(), 1)["container"]
    inspect = json.loads(
        subprocess.run(["docker", "inspect", name], capture_output=True, text=True, check=True).stdout
    )[0]["HostConfig"]
    assert inspect["CapDrop"] == ["ALL"] and not inspect["CapAdd"]
    assert "no-new-privileges:true" in inspect["SecurityOpt"]
    assert inspect["ReadonlyRootfs"] is True and inspect["IpcMode"] == "private"

    def inside(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["docker", "exec", name, *argv], capture_output=True, text=True, timeout=60)

    marker = Path("/dev/shm") / f"deploytool-test-{secrets.token_hex(6)}"
    marker.write_text("the host's shared memory")
    try:
        assert marker.name not in inside("ls", "/dev/shm").stdout
        assert inside("cat", str(marker)).returncode != 0
        # its own /dev/shm is writable, and the host does not see what it writes there
        assert inside("touch", f"/dev/shm/{marker.name}-inside").returncode == 0
        assert not Path(f"/dev/shm/{marker.name}-inside").exists()
    finally:
        marker.unlink()
    status = inside("cat", "/proc/1/status").stdout
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    assert (
        int(fields["CapEff"], 16) == 0
        and int(fields["CapBnd"], 16) == 0
        and fields["NoNewPrivs"].strip() == "1"
    )
    wrote = inside("touch", "/etc/deploytool-test")
    assert wrote.returncode != 0 and "Read-only file system" in wrote.stderr
    assert inside("touch", "/tmp/scratch").returncode == 0  # /tmp is the container's own tmpfs
    # and the server serves through all of it
    assert release_row(slot_status(), 1)["health"] == "healthy"


def test_a_server_that_downloads_gets_back_only_the_right_to_write_the_hosts_hub_cache():
    card = ProfileStore().get("h200-qwen3.6-35b-a3b-fp8")
    offline = RenderRequest(profile=card, slot=Slot((CARD,)), release=1, image="x")
    assert "cap_add" not in render_compose(offline)["services"]["server"]
    online = card.model_copy(update={"model": card.model.model_copy(update={"offline": False})})
    req = RenderRequest(profile=online, slot=Slot((CARD,)), release=1, image="x")
    server = render_compose(req)["services"]["server"]
    assert server["cap_drop"] == ["ALL"] and server["cap_add"] == ["DAC_OVERRIDE"]
    assert (
        "# capability DAC_OVERRIDE added back, because the server downloads into the host's hub cache"
        in render_text(req)
    )


def test_weights_closed_to_others_are_named_by_up_and_unreadable_in_the_container(
    slot_env, profiles_dir: Path, tmp_path: Path
):
    """A checkpoint written under umask 077 by a user of the host: root in the container, with
    every capability dropped, cannot read it, and `up` says so with the fix before it starts."""
    if os.geteuid() != 0:
        pytest.skip("needs root to give the checkpoint to another user")
    from fake_checkpoints import write_model_folder

    folder = write_model_folder(tmp_path / "ckpt" / "Tiny-Model")
    for path in [folder.parent, folder, *folder.iterdir()]:
        os.chown(path, 1000, 1000)
        path.chmod(0o700 if path.is_dir() else 0o600)
    (profiles_dir / "t-weights.yaml").write_text(
        f"name: t-weights\nextends: t-good\nmodel:\n  host_path: {folder}\n  path: /models/tiny\n"
    )
    started = up(slot_env, "t-weights")
    assert started.returncode == 0, started.stderr
    said = started.stdout + started.stderr
    assert f"chmod -R o+rX {folder}" in said and "mode 0700, owner uid 1000" in said, said
    name = release_row(slot_status(), 1)["container"]

    def read() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["docker", "exec", name, "cat", "/models/tiny/config.json"],
            capture_output=True,
            text=True,
            timeout=60,
        )

    closed = read()
    assert closed.returncode != 0 and "Permission denied" in closed.stderr
    subprocess.run(["chmod", "-R", "o+rX", str(folder.parent)], check=True)  # the fix the warning names
    assert json.loads(read().stdout) == json.loads((folder / "config.json").read_text())
