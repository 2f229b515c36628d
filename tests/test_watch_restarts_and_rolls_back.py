"""`deploytool watch` on the real engine: a release whose /health fails while its process runs
on (Docker leaves it alone) is restarted; a release that crash-loops right after its cut-over
is rolled back to the stopped previous release, with the on-failure hook run and journaled."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import httpx
import pytest
from conftest import free_port, run_cli, start_cli
from lifecycle_helpers import health_check, remove_instance, served_decode_tps

pytestmark = pytest.mark.index  # the sim image's wheels are downloaded once (then cached)

FAST = """\
name: {name}
extends: sim
server:
  args:
    startup-seconds: 0.5
    decode-tps: {tps}
  env: {env}
health: {health}
watch: {watch}
"""


def write(folder: Path, name: str, tps: int, env: str = "{}", watch: str = "{}") -> None:
    (folder / f"{name}.yaml").write_text(
        FAST.format(name=name, tps=tps, env=env, watch=watch, health=health_check())
    )


def events(name: str) -> list[dict]:
    lines = (Path(os.environ["DEPLOYTOOL_HOME"]) / "journal.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["event"] == name]


@pytest.fixture
def folder(docker_engine, tmp_path: Path):
    path = tmp_path / "profiles"
    path.mkdir()
    yield path
    remove_instance(docker_engine)


def watch_until(event: str, slot: str, hooks: Path, *, max_seconds: float) -> dict:
    """`deploytool watch` in the foreground until it has journaled `event`, then a few more
    rounds (what it does after that, nothing, is part of what is tested), then Ctrl-C, as a
    person ends it; its --json result. max_seconds bounds it where the event never comes."""
    proc = start_cli(
        "watch", "--cpu-slot", slot, "--max-seconds", str(max_seconds), "--hooks", str(hooks), "--json"
    )
    deadline = time.monotonic() + max_seconds + 60
    while proc.poll() is None and not events(event):
        assert time.monotonic() < deadline, "watch neither acted nor stopped"
        time.sleep(0.1)
    interrupted = proc.poll() is None
    if interrupted:
        time.sleep(1.5)  # three more rounds at its 0.5 s interval
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    result = json.loads(out)
    if interrupted:  # the Ctrl-C ended it, not the clock (a watch that ignored it still exits 0)
        assert result["seconds"] < max_seconds, result
    return result


def up(folder: Path, slot: str, profile: str, port: int) -> None:
    out = run_cli(
        "up",
        "--cpu-slot",
        slot,
        "--profile",
        profile,
        "--port",
        str(port),
        "--skip-qualify",
        "--profiles-dir",
        str(folder),
    )
    assert out.returncode == 0, out.stderr


def test_watch_restarts_a_release_whose_health_fails_while_it_runs_up_to_its_cap(
    folder: Path, docker_engine, tmp_path: Path
):
    # healthy for 4 s after it is ready: `up` sees it healthy about 1 s after its start, so that
    # is long enough on a loaded machine (a failure before watch's first round is restarted alike)
    write(
        folder,
        "t-wedge",
        2000,
        "{DEPLOYTOOL_SIM_FAULT: health_fail_after=4}",
        "{interval: 0.5, failures: 2, backoff: 0, max_restarts_per_hour: 1, crash_loop_window: 0}",
    )
    hooks, ran = tmp_path / "hooks", tmp_path / "ran"
    hooks.mkdir()
    (hooks / "on-failure").write_text(f'#!/bin/sh\necho "$DEPLOYTOOL_ACTION $DEPLOYTOOL_RELEASE" >> {ran}\n')
    (hooks / "on-failure").chmod(0o755)
    port = free_port()
    up(folder, "w", "t-wedge", port)
    release = docker_engine.release("cpu-w", 1)
    started_before = docker_engine.client.containers.get(release.container_id).attrs["State"]["StartedAt"]
    actions = watch_until("watch.capped", "w", hooks, max_seconds=60)["actions"]
    # restarted once (its /health failed while the process ran on), failed again: the cap of 1 an hour
    assert [(a["event"], a["slot"], a["release"]) for a in actions] == [
        ("watch.restart", "cpu-w", 1),
        ("watch.capped", "cpu-w", 1),
    ]
    container = docker_engine.client.containers.get(release.container_id)
    assert container.attrs["State"]["StartedAt"] != started_before  # really restarted
    assert container.status == "running"  # and left running at the cap, for a person to look at
    assert [e["event"] for e in events("watch.restart") + events("watch.capped")] == [
        "watch.restart",
        "watch.capped",
    ]
    assert ran.read_text().split() == ["watch-capped", "1"]


def test_watch_rolls_a_crash_loop_after_cut_over_back_to_the_previous_release(
    folder: Path, docker_engine, tmp_path: Path
):
    write(folder, "t-steady", 2000)
    write(
        folder,
        "t-loop",
        3000,
        "{DEPLOYTOOL_SIM_FAULT: exit_after=4}",
        "{interval: 0.5, failures: 1, backoff: 0, crash_loop_window: 300, crash_loop_restarts: 2}",
    )
    hooks, ran = tmp_path / "hooks", tmp_path / "ran"
    hooks.mkdir()
    (hooks / "on-failure").write_text(
        f'#!/bin/sh\necho "$DEPLOYTOOL_SLOT $DEPLOYTOOL_RELEASE $DEPLOYTOOL_ERROR" >> {ran}\n'
    )
    (hooks / "on-failure").chmod(0o755)
    port = free_port()
    up(folder, "l", "t-steady", port)
    up(folder, "l", "t-loop", port)  # healthy at its cut-over; exits 4 s later, again and again
    kinds = [a["event"] for a in watch_until("watch.rolled_back", "l", hooks, max_seconds=90)["actions"]]
    assert "watch.crash_loop" in kinds and kinds[-1] == "watch.rolled_back", kinds
    rolled = events("watch.rolled_back")[-1]
    assert (rolled["release"], rolled["stopped"]) == (1, 2)
    assert (
        served_decode_tps(port) == 2000
        and httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
    )
    assert docker_engine.release("cpu-l", 2).state == "exited"  # stopped, kept for inspection
    status = {s["slot"]: s for s in json.loads(run_cli("status", "--json").stdout)["slots"]}["cpu-l"]
    assert status["current"] == 1
    assert ran.read_text().startswith("cpu-l 2 crash loop after cut-over")
    hook_runs = [e for e in events("hook") if e["hook"] == "on-failure"]
    assert len(hook_runs) == 1 and hook_runs[0]["exit_code"] == 0


def test_the_unattended_watch_service_renders_valid_compose_and_a_systemd_unit(docker_engine, tmp_path: Path):
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    out = run_cli("watch", "--render", "compose", "--image", "deploytool/watch:local", "--hooks", str(hooks))
    assert out.returncode == 0, out.stderr
    (tmp_path / "watch.yaml").write_text(out.stdout)
    config = docker_engine.compose_config(tmp_path / "watch.yaml")  # the compose plugin's own check
    import yaml

    service = yaml.safe_load(config)["services"]["watch"]
    assert service["restart"] == "unless-stopped" and service["network_mode"] == "host"
    mounts = {v["target"]: v for v in service["volumes"]}
    assert mounts["/var/run/docker.sock"].get("read_only") is not True  # watch restarts containers
    assert mounts["/var/lib/deploytool"]["source"] == os.environ["DEPLOYTOOL_HOME"]
    assert mounts["/etc/deploytool/hooks"]["read_only"] is True
    assert service["command"] == ["deploytool", "watch", "--hooks", "/etc/deploytool/hooks"]
    unit = run_cli("watch", "--render", "systemd", "--user", "deploy").stdout
    assert "Restart=always" in unit and "User=deploy" in unit and "SupplementaryGroups=docker" in unit
    assert (
        f"DEPLOYTOOL_HOME={os.environ['DEPLOYTOOL_HOME']}" in unit and "watch" in unit.split("ExecStart=")[1]
    )
    assert run_cli("watch", "--render", "compose").returncode == 2  # the image must be named
