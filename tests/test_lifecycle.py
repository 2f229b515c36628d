"""The lifecycle on the real Docker engine with real `docker compose`: build, up, cut over,
roll back, and every way an up can fail without losing the serving release."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, free_port, run_cli
from lifecycle_helpers import release_row, served_decode_tps, slot_status, up

pytestmark = (
    pytest.mark.index
)  # the sim image's wheels are downloaded once (then cached); docker: from the fixture


def test_build_twice_second_is_a_noop(slot_env):
    first = slot_env("build", "--profile", "t-good", "--json")
    assert first.returncode == 0, first.stderr
    second = slot_env("build", "--profile", "t-good", "--json")
    assert second.returncode == 0, second.stderr
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    assert a["image"] == b["image"] and a["image"].startswith("deploytool/sim:t-good-")
    assert b["built"] is False
    # The base is pinned by tag only: the tag says so, and the label records what it resolved to.
    assert a["image"].endswith("-base-by-tag")
    assert b["labels"]["dev.deploytool.inputs-hash"].startswith(a["image"].rsplit("-", 4)[1])
    assert b["labels"]["org.opencontainers.image.base.digest"].startswith("sha256:")
    assert "python" in json.loads(b["labels"]["dev.deploytool.toolchain"])
    human = slot_env("build", "--profile", "t-good")
    assert "up to date" in human.stderr and human.stdout.strip() == a["image"]


def test_up_cutover_and_rollback(slot_env):
    port = slot_env.port
    one = up(slot_env, "t-good")
    assert one.returncode == 0, one.stderr
    assert json.loads(one.stdout)["release"] == 1 and served_decode_tps(port) == 2000

    two = up(slot_env, "t-good2")
    assert two.returncode == 0, two.stderr
    result = json.loads(two.stdout)
    assert result["release"] == 2 and result["previous"] == 1
    assert served_decode_tps(port) == 3000
    status = slot_status()
    assert status["current"] == 2 and status["previous"] == 1
    assert release_row(status, 1)["state"] == "exited"  # stopped, not removed
    assert release_row(status, 1)["role"] == "rollback target"

    back = slot_env("rollback", "--cpu", "--json")
    assert back.returncode == 0, back.stderr
    assert json.loads(back.stdout)["release"] == 1
    assert served_decode_tps(port) == 2000  # release 1 serves again, healthy
    status = slot_status()
    assert release_row(status, 1)["state"] == "running" and release_row(status, 1)["health"] == "healthy"
    assert release_row(status, 2)["state"] == "exited"
    events = [
        e["event"]
        for e in json.loads(run_cli("journal", "--cpu", "--json", "--limit", "100").stdout)["entries"]
    ]
    assert events.count("cutover") == 2 and events[-1] == "rollback" and "qualify.skipped" in events


def test_a_release_that_never_gets_healthy_or_crashes_restores_the_previous_one(slot_env):
    """One serving release, then each way a new one fails its start in turn (the same setup
    serves both: the second failure restores a release that was itself restored)."""
    assert up(slot_env, "t-good").returncode == 0
    for number, bad, why in (
        (2, "t-never", "within its health budget of 2 s"),
        (3, "t-crash", "crashed while starting"),
    ):
        failed = up(slot_env, bad)
        assert failed.returncode == 1, (bad, failed.stderr)
        assert why in failed.stderr and "release 1 was restored and is healthy" in failed.stderr, (
            failed.stderr
        )
        assert "Traceback" not in failed.stderr
        assert served_decode_tps(slot_env.port) == 2000
        status = slot_status()
        assert status["current"] == 1
        assert release_row(status, number)["state"] == "exited"  # kept for inspection
        assert release_row(status, 1)["health"] == "healthy"


def test_second_concurrent_up_is_refused(slot_env, profiles_dir: Path):
    # (no release serves before: the slot's lock is held for the whole up either way)
    # A start-up slow enough that the first up surely holds the slot while the second one asks.
    (profiles_dir / "t-slow.yaml").write_text(
        "name: t-slow\nextends: t-good\nserver:\n  args:\n    startup-seconds: 7\n"
    )
    args = [
        sys.executable,
        "-m",
        "deploytool",
        "up",
        "--cpu",
        "--profile",
        "t-slow",
        "--skip-qualify",
        "--port",
        str(slot_env.port),
        "--profiles-dir",
        str(profiles_dir),
    ]
    from deploytool.release.state import slot_dir

    first = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    holder = slot_dir("cpu") / "lock.holder"
    deadline = time.monotonic() + 60
    while not holder.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # wait until the first one holds the slot, however slow the machine
    assert holder.exists(), "the first up never took the slot's lock"
    second = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert second.returncode == 5, second.stderr
    assert "slot cpu is busy" in second.stderr and "`deploytool up` (pid" in second.stderr
    assert first.wait(timeout=300) == 0, first.stderr.read()


def test_port_in_use_is_refused_before_anything_is_stopped(slot_env):
    assert up(slot_env, "t-good").returncode == 0
    other = free_port()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", other))
        squatter.listen()
        failed = up(slot_env, "t-good2", "--port", str(other))
    assert failed.returncode == 1
    assert f"port {other} on 127.0.0.1 is already in use by another process" in failed.stderr
    assert served_decode_tps(slot_env.port) == 2000
    events = [e["event"] for e in json.loads(run_cli("journal", "--cpu", "--json").stdout)["entries"]]
    assert "release.stopped" not in events  # release 1 was never taken down
    # The port of another slot's release is named as such.
    taken = up(slot_env, "t-good2", "--port", str(slot_env.port))  # same slot: hand-over, allowed
    assert taken.returncode == 0, taken.stderr


def test_prune_keeps_retention_and_the_rollback_target(slot_env):
    for profile in ("t-good", "t-good2", "t-good", "t-good2"):
        assert up(slot_env, profile, "--retention", "2").returncode == 0
    status = slot_status()
    # current 4, rollback target 3, one more stopped kept (2); release 1 pruned
    assert sorted(r["release"] for r in status["releases"]) == [2, 3, 4]
    assert status["previous"] == 3


def test_status_json_when_nothing_runs(docker_engine):
    out = run_cli("status", "--json")
    assert out.returncode == 0 and json.loads(out.stdout) == {"slots": []}


def test_no_engine_is_a_clear_error():
    out = run_cli("up", "--cpu", "--profile", "sim", env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert out.returncode == 3
    assert "no Docker engine is reachable" in out.stderr and "Traceback" not in out.stderr


def test_up_qualifies_then_cuts_over_and_a_failed_gate_rolls_back(
    slot_env, profiles_dir: Path, deploytool_home: Path
):
    (profiles_dir / "t-badtools.yaml").write_text(
        "name: t-badtools\nextends: t-good2\nserver:\n  env: {DEPLOYTOOL_SIM_FAULT: bad_tool_json}\n"
    )
    quick = (
        "--suite",
        "preflight",
        "--suite",
        "contract",
        "--suite",
        "tools",
        "--suite",
        "gsm8k",
        "--limit",
        "10",
    )
    good = slot_env("up", "--cpu", "--profile", "t-good", "--json", *quick)
    assert good.returncode == 0, good.stderr
    result = json.loads(good.stdout)
    assert result["qualify"]["passed"] is True and result["qualify_skipped"] is False
    report = Path(result["qualify"]["report_dir"])
    suites = {s["name"]: s["verdict"] for s in json.loads((report / "results.json").read_text())["suites"]}
    assert suites == {"preflight": "passed", "contract": "passed", "tools": "passed", "gsm8k": "passed"}
    assert (report / "report.html").exists()
    assert "a simulator, not a model" in (report / "report.md").read_text()  # never passed off as a model
    assert "a simulator, not a model" in result["qualify"]["summary"]

    bad = slot_env("up", "--cpu", "--profile", "t-badtools", *quick)
    assert bad.returncode == 1
    assert "release 2 failed qualification" in bad.stderr and "tools" in bad.stderr
    assert "release 1 was restored and is healthy" in bad.stderr
    from deploytool.release.state import release_dir

    failed_report = release_dir("cpu", 2) / "qualify"
    assert str(failed_report / "report.md") in bad.stderr  # the error points at the report
    failed_suites = {
        s["name"]: s["verdict"] for s in json.loads((failed_report / "results.json").read_text())["suites"]
    }
    assert failed_suites["tools"] == "failed" and failed_suites["preflight"] == "passed"
    status = slot_status()
    assert status["current"] == 1 and release_row(status, 2)["state"] == "exited"
    assert served_decode_tps(slot_env.port) == 2000


def test_build_error_names_the_failing_step_and_its_output(docker_engine, tmp_path: Path):
    """A base without a shell: the sim recipe's venv step fails, and the user sees which step."""
    import io
    import tarfile

    payload = io.BytesIO()
    with tarfile.open(fileobj=payload, mode="w") as tar:
        info = tarfile.TarInfo("etc/hostname")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"none\n"))
    base = f"deploytool-test-noshell:{os.getpid()}"
    docker_engine.client.api.import_image_from_data(
        payload.getvalue(), repository=base.split(":")[0], tag=base.split(":")[1]
    )
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "t-noshell.yaml").write_text(f"name: t-noshell\nextends: sim\nimage: {{base: '{base}'}}\n")
    try:
        out = run_cli("build", "--profile", "t-noshell", "--profiles-dir", str(folder))
    finally:
        docker_engine.client.images.remove(base, force=True)
    assert out.returncode == 1, out.stderr
    assert "build of deploytool/sim:t-noshell-" in out.stderr
    assert "failed at step 4/" in out.stderr and "RUN python3.11 -m venv" in out.stderr
    assert "Traceback" not in out.stderr


def test_failed_rollback_brings_the_current_release_back(slot_env):
    """Release 1 published on one port, release 2 on another; when release 1's port is taken,
    the rollback cannot start it, and release 2 must serve again."""
    assert up(slot_env, "t-good").returncode == 0
    other = free_port()
    assert up(slot_env, "t-good2", "--port", str(other)).returncode == 0
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", slot_env.port))
        squatter.listen()
        back = run_cli("rollback", "--cpu")
    assert back.returncode == 1, back.stderr
    assert (
        "rollback to release 1 failed" in back.stderr
        and "release 2 was restored and is healthy" in back.stderr
    )
    assert "Traceback" not in back.stderr
    assert served_decode_tps(other) == 3000
    status = slot_status()
    assert status["current"] == 2 and status["previous"] == 1  # pointers unchanged
    events = [e["event"] for e in json.loads(run_cli("journal", "--cpu", "--json").stdout)["entries"]]
    assert "rollback.failed" in events and events[-1] == "restored"
