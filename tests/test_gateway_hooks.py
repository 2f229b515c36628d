"""Gateway hooks as real executables: what they are told (slot, release, URL, profile), that a
failing or slow pre-stop refuses the stop, that each run is journaled with its exit code and
duration (and never its output), and that a bad hooks folder is refused before anything runs."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from deploytool.deploy.hooks import GatewayHooks, HookFailed
from deploytool.deploy.steps import CutOver, Plan, Stop
from deploytool.errors import DeployError, UsageError
from deploytool.release.state import read_journal


def hook(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


def plan() -> Plan:
    stop = Stop(release=1, container="c1", reason="handing over", url="http://127.0.0.1:31001")
    return Plan(
        action="up",
        slot="cpu-a",
        release=2,
        serving=1,
        fallback=1,
        url="http://127.0.0.1:31001",
        profile="sim",
        steps=[stop, CutOver(release=2, previous=1, next_release=3)],
    )


def test_each_hook_gets_the_slot_release_url_and_profile_and_is_journaled(tmp_path: Path):
    seen = tmp_path / "seen"
    for name in ("pre-stop", "post-cutover", "post-rollback", "on-failure"):
        hook(
            tmp_path,
            name,
            f'echo "$DEPLOYTOOL_HOOK $DEPLOYTOOL_SLOT $DEPLOYTOOL_RELEASE $DEPLOYTOOL_URL '
            f'$DEPLOYTOOL_PROFILE $DEPLOYTOOL_ERROR" >> {seen}; echo secret-output',
        )
    hooks, p = GatewayHooks(tmp_path), plan()
    hooks.before_step(p, p.steps[0])
    hooks.after_step(p, p.steps[1])
    hooks.on_failure(p, DeployError("release 2 failed qualification\nmore"))
    hooks.after_restore(p, 1, "http://127.0.0.1:31001")
    assert [line.rstrip() for line in seen.read_text().splitlines()] == [
        "pre-stop cpu-a 1 http://127.0.0.1:31001 sim",  # the release being drained
        "post-cutover cpu-a 2 http://127.0.0.1:31001 sim",
        "on-failure cpu-a 2 http://127.0.0.1:31001 sim release 2 failed qualification",
        "post-rollback cpu-a 1 http://127.0.0.1:31001 sim",
    ]
    runs = [e for e in read_journal() if e["event"] == "hook"]
    assert [(e["hook"], e["exit_code"], e["slot"]) for e in runs] == [
        ("pre-stop", 0, "cpu-a"),
        ("post-cutover", 0, "cpu-a"),
        ("on-failure", 0, "cpu-a"),
        ("post-rollback", 0, "cpu-a"),
    ]
    assert all(e["seconds"] >= 0 and e["timed_out"] is False for e in runs)
    assert "secret-output" not in (Path(os.environ["DEPLOYTOOL_HOME"]) / "journal.jsonl").read_text()


def test_a_failing_pre_stop_refuses_the_stop(tmp_path: Path):
    hook(tmp_path, "pre-stop", "exit 7")
    p = plan()
    with pytest.raises(HookFailed, match=r"exited with status 7.*was not stopped and still serves"):
        GatewayHooks(tmp_path).before_step(p, p.steps[0])
    assert [e["exit_code"] for e in read_journal() if e["event"] == "hook"] == [7]


def test_a_hook_past_its_time_limit_is_killed_with_what_it_started(tmp_path: Path):
    marker = tmp_path / "still-running"
    hook(tmp_path, "pre-stop", f"(sleep 3; touch {marker}) & sleep 30")
    p, started = plan(), time.monotonic()
    with pytest.raises(HookFailed, match=r"ran past its time limit of 0.5 s"):
        GatewayHooks(tmp_path, timeout_s=0.5).before_step(p, p.steps[0])
    assert time.monotonic() - started < 30  # killed at its limit, not waited for: its own sleep is 30 s
    time.sleep(3.5)
    assert not marker.exists()  # its child was killed too
    entry = next(e for e in read_journal() if e["event"] == "hook")
    assert entry["timed_out"] is True and entry["exit_code"] is None


def test_no_folder_no_hooks_and_a_bad_folder_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("DEPLOYTOOL_HOOKS", raising=False)
    p = plan()
    GatewayHooks(None).before_step(p, p.steps[0])  # nothing to run, nothing journaled
    assert not [e for e in read_journal() if e["event"] == "hook"]
    with pytest.raises(UsageError, match="does not exist"):
        GatewayHooks(tmp_path / "missing")
    (tmp_path / "pre-stop").write_text("#!/bin/sh\n")
    with pytest.raises(UsageError, match="not executable"):
        GatewayHooks(tmp_path)
    monkeypatch.setenv("DEPLOYTOOL_HOOKS", str(tmp_path / "missing"))
    with pytest.raises(UsageError, match="does not exist"):
        GatewayHooks(None)
    monkeypatch.delenv("DEPLOYTOOL_HOOKS")
    monkeypatch.setenv("DEPLOYTOOL_HOOK_TIMEOUT", "soon")
    with pytest.raises(UsageError, match="DEPLOYTOOL_HOOK_TIMEOUT"):
        GatewayHooks(None, timeout_s=None)
