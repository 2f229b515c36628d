"""On the real engine: `--dry-run` prints the plan and changes nothing (engine state, files,
journal), and Ctrl-C during an up restores the serving release, says so, and exits 130."""

from __future__ import annotations

import hashlib
import json
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from conftest import run_cli, start_cli
from lifecycle_helpers import served_decode_tps, slot_status, up

pytestmark = (
    pytest.mark.index
)  # the sim image's wheels are downloaded once (then cached); docker: from the fixture


def engine_state(engine, tags: tuple[str, ...] = ()) -> list[tuple]:
    """This instance's containers and volumes, and the images they run or that `tags` name.
    Images by profile label would see another run's builds on a shared engine (a second
    checkout's suite makes its own t-good images meanwhile), which no dry run here made."""
    from deploytool.host import labels

    containers = engine.client.containers.list(
        all=True, filters={"label": f"{labels.INSTANCE}={labels.instance()}"}
    )
    volumes = engine.client.volumes.list(filters={"label": f"{labels.INSTANCE}={labels.instance()}"})
    images = {c.attrs["Image"] for c in containers}
    for tag in tags:
        images |= {i.id for i in engine.client.images.list(name=tag)}
    return sorted(
        [("container", c.name, c.status, c.attrs["State"].get("StartedAt")) for c in containers]
        + [("volume", v.name, "", "") for v in volumes]
        + [("image", i, "", "") for i in images]
    )


def files_state(home: Path) -> dict[str, str]:
    """Every file under the state directory (but the shared download cache) and its content."""
    return {
        str(p.relative_to(home)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(home.rglob("*"))
        if p.is_file() and "cache" not in p.relative_to(home).parts
    } | {
        str(p.relative_to(home)) + "/": ""
        for p in sorted(home.rglob("*"))
        if p.is_dir() and "cache" not in p.relative_to(home).parts
    }


def test_dry_runs_print_the_plan_and_change_nothing(
    slot_env, docker_engine, profiles_dir: Path, deploytool_home: Path
):
    assert up(slot_env, "t-good").returncode == 0
    assert up(slot_env, "t-good2").returncode == 0
    # the image the dry runs would build for release 3, were they to build
    from deploytool.image.build import plan_build
    from deploytool.profiles import ProfileStore

    tags = (plan_build(ProfileStore([profiles_dir]).get("t-good")).tag,)
    before = (engine_state(docker_engine, tags), files_state(deploytool_home))

    # the dry runs at once: each only reads (what it reads is compared below, after all four),
    # and their start-ups and engine queries overlap instead of adding up
    with ThreadPoolExecutor(4) as pool:
        human, data, back, pruned = pool.map(
            lambda call: call[0](*call[1:]),
            [
                (slot_env, "up", "--cpu", "--profile", "t-good", "--dry-run", "--suite", "preflight"),
                (
                    slot_env,
                    "up",
                    "--cpu",
                    "--profile",
                    "t-good",
                    "--dry-run",
                    "--json",
                    "--suite",
                    "preflight",
                ),
                (run_cli, "rollback", "--cpu", "--dry-run", "--json"),
                (run_cli, "prune", "--cpu", "--retention", "1", "--dry-run", "--json"),
            ],
        )
    assert human.returncode == 0, human.stderr
    assert "stop release 2" in human.stdout and "start release 3" in human.stdout
    assert "qualify release 3: preflight" in human.stdout and "start release 2 again" in human.stdout
    assert data.returncode == 0, data.stderr
    plan = json.loads(data.stdout)["plan"]
    assert plan["release"] == 3 and plan["serving"] == 2 and plan["fallback"] == 2
    assert [s["step"] for s in plan["steps"]] == [
        "Build",
        "WriteRelease",
        "Stop",
        "PrepareCache",
        "Start",
        "WaitHealthy",
        "Qualify",
        "CutOver",
        "Prune",
    ]
    cache = next(s for s in plan["steps"] if s["step"] == "PrepareCache")
    assert cache["action"] == "kept"  # read from the volume: same image, same cards
    assert plan["compose"]["services"]["server"]["labels"]["dev.deploytool.release"] == "3"

    assert back.returncode == 0, back.stderr
    assert [s["step"] for s in json.loads(back.stdout)["plan"]["steps"]][-1] == "CutOver"
    assert pruned.returncode == 0, pruned.stderr
    assert json.loads(pruned.stdout)["plan"]["steps"][0]["releases"] == []  # 1 is the rollback target

    assert (engine_state(docker_engine, tags), files_state(deploytool_home)) == before
    assert served_decode_tps(slot_env.port) == 3000
    # The release number was not used: the next real up is release 3.
    third = up(slot_env, "t-good")
    assert third.returncode == 0 and json.loads(third.stdout)["release"] == 3


def test_ctrl_c_during_an_up_restores_the_serving_release_and_exits_130(
    slot_env, docker_engine, profiles_dir: Path
):
    assert up(slot_env, "t-good").returncode == 0
    # answers 503 for 60 s, and up waits for it far longer than that: the Ctrl-C below lands
    # while up waits, however slowly a loaded machine starts the container
    (profiles_dir / "t-slow.yaml").write_text(
        "name: t-slow\nextends: t-good\nserver:\n  args:\n"
        "    startup-seconds: 60\n"
        "health: {start_period: 600, start_interval: 1, interval: 2, "
        "timeout: 2, retries: 2}\n"
    )
    proc = start_cli(
        "up",
        "--cpu",
        "--profile",
        "t-slow",
        "--skip-qualify",
        "--port",
        str(slot_env.port),
        "--profiles-dir",
        str(profiles_dir),
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        # asked of the engine from here, not through a `status` process a round (a second of CPU
        # each, taken from the up it waits on)
        starting = docker_engine.release("cpu", 2)
        if starting is not None and starting.running:
            break  # the new release is starting (60 s before it is ready): the hand-over has begun
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err
    assert "interrupted (Ctrl-C)" in err and "release 1 was restored and is healthy" in err, err
    assert "Traceback" not in err
    assert httpx.get(f"http://127.0.0.1:{slot_env.port}/health", timeout=5).status_code == 200
    assert served_decode_tps(slot_env.port) == 2000
    status = slot_status()
    assert status["current"] == 1
    entries = json.loads(run_cli("journal", "--cpu", "--json", "--limit", "100").stdout)["entries"]
    events = [e["event"] for e in entries]
    assert "up.failed" in events and events[-1] == "restored"
    # The journal reads as the plan applied: each step as it began, the restore's marked as such.
    steps = [(e["step"], e["restore"]) for e in entries if e["event"] == "step" and e["release"] == 2]
    assert ("Stop", False) in steps and ("WaitHealthy", True) in steps
