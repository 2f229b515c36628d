"""`stop`, `start`, `down` and `logs` on the real engine with real `docker compose` and the
reference runtime: a slot leaves service (drained by the server's own count, every release
kept), comes back healthy, is read (a kept release's log, a follow across a restart, the log
a failed `up` names) and removed (releases, projects and networks; the cache volume and state
only with --volumes); a slot with nothing to do, or held by another command, changes nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
from conftest import start_cli
from lifecycle_helpers import served_decode_tps, slot_status, up

pytestmark = pytest.mark.index  # the sim image's wheels are downloaded once (then cached)


def _json(out: subprocess.CompletedProcess[str]) -> dict:
    return json.loads(out.stdout)


def _releases() -> dict[int, str]:
    return {r["release"]: r["state"] for r in slot_status()["releases"]}


def _journal(event: str) -> list[dict]:
    lines = (Path(os.environ["DEPLOYTOOL_HOME"]) / "journal.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["event"] == event]


def slot_steps(slot_env, port: int) -> None:
    """Stop, start and logs of a slot serving release 2 (1 kept), with their refusals."""
    from deploytool.host.slots import Slot
    from deploytool.release.state import slot_lock

    # stop: drained by the server's count (nothing in flight: 0 waited for), stopped, both kept
    plan = _json(slot_env("stop", "--cpu", "--dry-run", "--json"))["plan"]
    assert [s["step"] for s in plan["steps"]] == ["Stop"] and plan["steps"][0]["drain_s"] == 30
    stopped = slot_env("stop", "--cpu", "--drain-timeout", "5", "--json")
    assert stopped.returncode == 0, stopped.stderr
    result = _json(stopped)
    assert result["release"] == 2 and result["drains"][0]["drained"] and result["drains"][0]["at_start"] == 0
    assert _releases() == {1: "exited", 2: "exited"}
    # up's hand-over drained release 1 before stopping it, as the stop drained release 2
    assert [(e["release"], e["drained"]) for e in _journal("release.drained")] == [(1, True), (2, True)]
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)

    # nothing to stop: a clear answer, nothing changes
    again = slot_env("stop", "--cpu", "--json")
    assert again.returncode == 1 and "has nothing to stop" in _json(again)["error"]["message"]
    assert "deploytool start --cpu" in _json(again)["error"]["hint"]
    assert _releases() == {1: "exited", 2: "exited"}

    # start: the current release again, verified healthy; a second start has nothing to do
    started = slot_env("start", "--cpu", "--json")
    assert started.returncode == 0, started.stderr
    assert _json(started)["release"] == 2 and served_decode_tps(port) == 3000
    twice = slot_env("start", "--cpu", "--json")
    assert twice.returncode == 1 and "already serves" in _json(twice)["error"]["message"]

    # a slot held by another command (watch, a rollout: the slot's lock) is refused, untouched
    with slot_lock(Slot().name, "rollout test-hold"):
        held = slot_env("stop", "--cpu", "--json")
    assert held.returncode != 0 and "rollout test-hold" in _json(held)["error"]["message"]
    assert _releases() == {1: "exited", 2: "running"}

    # logs: the serving release's, a kept release's, --tail
    serving = slot_env("logs", "--cpu")
    assert serving.returncode == 0 and "listening on http://0.0.0.0:30000" in serving.stdout
    kept = slot_env("logs", "--cpu", "--release", "1", "--tail", "1", "--json")
    assert len(_json(kept)["lines"]) == 1
    missing = slot_env("logs", "--cpu", "--release", "9", "--json")
    assert missing.returncode == 1 and "kept: 1, 2" in _json(missing)["error"]["message"]


def test_stop_start_logs_and_down_of_a_slot(slot_env, docker_engine):
    from deploytool.host import labels
    from deploytool.host.slots import Slot
    from deploytool.release.state import slot_path

    port = slot_env.port
    assert up(slot_env, "t-good").returncode == 0
    two = up(slot_env, "t-good2")
    assert two.returncode == 0, two.stdout + two.stderr  # release 2 serves, 1 is the rollback target
    assert [(d["release"], d["drained"]) for d in _json(two)["drains"]] == [
        (1, True)
    ]  # up's hand-over drained 1

    # --follow (read below, after the stop and start) goes on across a restart: the release's
    # second start is in the same stream; without --release it follows the slot: a new up, then
    # a rollback, each said in one line and followed by the new serving release's log from its
    # start (not its earlier runs)
    # as from a terminal: a suite started in the background would otherwise pass SIGINT on ignored
    follow = start_cli("logs", "--cpu", "--follow", "--since", "1h")
    seen: list[str] = []
    threading.Thread(target=lambda: seen.extend(follow.stdout), daemon=True).start()  # type: ignore[arg-type]

    def wait_for(what, deadline_s: float = 60) -> None:
        deadline = time.monotonic() + deadline_s
        while not what():
            assert time.monotonic() < deadline and follow.poll() is None, seen
            time.sleep(0.2)

    def after(notice: str) -> list[str]:
        found = [i for i, line in enumerate(seen) if line.startswith(notice)]
        return seen[found[0] + 1 :] if found else []

    listening = lambda lines: sum("listening on" in line for line in lines)  # noqa: E731
    try:
        wait_for(lambda: listening(seen) >= 1)  # following release 2 before it is stopped
        slot_steps(slot_env, port)
        # the follower, started before the stop and start above, is still on release 2
        wait_for(lambda: listening(seen) >= 2)
        assert not any(line.startswith("deploytool: slot") for line in seen), (
            seen
        )  # the same release: no notice
        assert up(slot_env, "t-good").returncode == 0  # release 3
        new_up = "deploytool: slot cpu is served by release 3 now (was release 2); its log follows"
        wait_for(lambda: listening(after(new_up)) >= 1)
        back = slot_env("rollback", "--cpu", "--json")
        assert back.returncode == 0 and served_decode_tps(port) == 3000, back.stderr  # release 2 again
        rolled = "deploytool: slot cpu is served by release 2 now (was release 3); its log follows"
        wait_for(lambda: listening(after(rolled)) >= 1)
        # its start this time, not its two earlier runs (they would come first)
        assert listening(after(rolled)) == 1, seen
    finally:
        follow.send_signal(signal.SIGINT)
        follow.wait(30)
    assert follow.returncode == 0 and "Traceback" not in follow.stderr.read(), seen  # Ctrl-C ends it cleanly

    # a failed up names the command that shows its whole log
    crashed = up(slot_env, "t-crash")
    assert crashed.returncode != 0
    assert "the whole log: deploytool logs --cpu --release 4" in _json(crashed)["error"]["message"]
    assert "FAULT crash_on_start" in slot_env("logs", "--cpu", "--release", "4").stdout

    # down: says what goes (the dry run changes nothing), then removes releases, projects, networks
    def networks():
        return docker_engine.client.networks.list(filters={"label": f"{labels.INSTANCE}={labels.instance()}"})

    assert networks(), "each release's network carries the instance label"
    dry = _json(slot_env("down", "--cpu", "--dry-run", "--json"))["plan"]
    assert [s["step"] for s in dry["steps"]] == ["Stop", "Remove", "Remove", "Remove", "Remove", "RemoveSlot"]
    assert _releases() == {1: "exited", 2: "running", 3: "exited", 4: "exited"}
    gone = slot_env("down", "--cpu", "--json")
    assert gone.returncode == 0, gone.stderr
    assert "goes: 2. remove release 1" in gone.stderr
    assert {f"release 1 (deploytool-{labels.instance()}-cpu-r1-server)"} <= set(_json(gone)["removed"])
    assert docker_engine.releases("cpu") == [] and networks() == []
    assert (
        docker_engine.volume_exists(Slot().cache_volume()) and slot_path("cpu").exists()
    )  # kept without --volumes
    volumes = slot_env("down", "--cpu", "--volumes", "--json")
    assert volumes.returncode == 0, volumes.stderr
    assert not docker_engine.volume_exists(Slot().cache_volume()) and not slot_path("cpu").exists()
    nothing = slot_env("down", "--cpu", "--json")
    assert nothing.returncode == 1 and "has nothing to remove" in _json(nothing)["error"]["message"]


def test_down_volumes_takes_a_killed_reads_container_and_names_any_other_user_of_the_volume(
    slot_env, docker_engine
):
    """A throwaway container that a killed deploytool left on the cache volume goes with it; a
    container of anything else using it stops `down --volumes` at the volume, named, and the
    release it has already removed is not brought back."""
    from deploytool.host import labels
    from deploytool.host.slots import Slot

    assert up(slot_env, "t-good").returncode == 0
    volume, image = Slot().cache_volume(), docker_engine.releases("cpu")[0].image
    mounted = {volume: {"bind": "/cache", "mode": "rw"}}
    left = docker_engine.client.containers.create(
        image, ["true"], network_mode="none", volumes=mounted, labels={labels.THROWAWAY: labels.instance()}
    )
    user = docker_engine.client.containers.run(
        image,
        ["300"],
        entrypoint=["sleep"],
        detach=True,
        volumes=mounted,
        network_mode="none",
        name=f"{labels.name_prefix()}-volume-user",
        labels={labels.INSTANCE: labels.instance()},
    )
    refused = slot_env("down", "--cpu", "--volumes", "--json")
    assert refused.returncode == 1
    error = _json(refused)["error"]
    assert f"volume {volume} is still in use by {user.name}" in error["message"]
    assert "release 1 was removed before that, as planned: nothing serves on slot cpu" in error["message"]
    assert "restor" not in error["message"] and "docker rm -f" in error["hint"]
    assert docker_engine.releases("cpu") == [] and docker_engine.volume_exists(volume)

    user.remove(force=True)
    assert slot_env("down", "--cpu", "--volumes").returncode == 0
    assert not docker_engine.volume_exists(volume)
    assert [
        c.id for c in docker_engine.client.containers.list(all=True, sparse=True) if c.id == left.id
    ] == []


def test_a_test_instance_never_touches_another_instances_release(
    slot_env, profiles_dir, tmp_path, docker_engine
):
    """A person's release left serving (the demo's: another instance, another state directory)
    and this test's slot of the same name: stop and down of the test's touch only the test's."""
    from conftest import free_port, run_cli, run_clis

    from deploytool.host import labels

    theirs = {
        "DEPLOYTOOL_INSTANCE": f"{labels.instance()}-person",
        "DEPLOYTOOL_HOME": str(tmp_path / "person"),
    }
    port = free_port()
    try:
        # theirs and this test's put up at once (two instances, two state directories)
        made, ours = run_clis(
            *(
                (
                    "up",
                    "--cpu",
                    "--profile",
                    name,
                    "--port",
                    str(where),
                    "--skip-qualify",
                    "--profiles-dir",
                    str(profiles_dir),
                )
                for name, where in (("t-good", port), ("t-good2", slot_env.port))
            ),
            envs=[theirs, None],
        )
        assert made.returncode == 0, made.stderr
        assert ours.returncode == 0, ours.stderr
        assert slot_env("stop", "--cpu").returncode == 0
        assert slot_env("down", "--cpu", "--volumes").returncode == 0
        # theirs serves on, untouched: its container, its network, its cache volume
        assert served_decode_tps(port) == 2000
        status = json.loads(run_cli("status", "--json", env=theirs).stdout)["slots"]
        assert [(s["slot"], s["serving"]) for s in status] == [("cpu", 1)]
    finally:
        assert run_cli("down", "--cpu", "--volumes", env=theirs).returncode == 0
