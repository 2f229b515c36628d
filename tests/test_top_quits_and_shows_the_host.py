"""`top` in a real terminal leaves on `q` and says so on screen, and names the reference runtime
as the simulator it is; without --url it shows every release serving on the host, another
deploytool instance's too (another user's on the same engine), named with its instance."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import free_port, run_cli
from lifecycle_helpers import up
from sim_process import SimProcess


def _pane(session: str) -> str:
    return subprocess.run(
        ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
    ).stdout


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt-get install tmux)")
def test_q_leaves_the_live_view_which_says_so_and_names_the_simulator(tmp_path: Path) -> None:
    with SimProcess(
        decode_tps=200, enable_metrics=True, default_chat_template_kwargs='{"enable_thinking": false}'
    ) as sim:
        session = f"topq-{tmp_path.name}"[:40]
        subprocess.run(
            [
                "tmux",
                "new-session",
                "-d",
                "-s",
                session,
                "-x",
                "160",
                "-y",
                "50",
                f"{sys.executable} -m deploytool top --url {sim.url} --profile sim --interval 0.5; "
                "echo EXIT=$?; sleep 30",
            ],
            check=True,
        )
        try:
            deadline, pane = time.monotonic() + 60, ""
            while time.monotonic() < deadline and "requests/s" not in pane:
                time.sleep(0.5)
                pane = _pane(session)
            subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
            pressed, after = time.monotonic(), ""
            while time.monotonic() - pressed < 20 and "EXIT=" not in after:
                time.sleep(0.3)
                after = _pane(session)
        finally:
            subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    assert "q or Ctrl-C quits" in pane, pane
    assert "profile sim (simulator)" in pane, pane
    assert "EXIT=0" in after, after  # `q` left it, without Ctrl-C


def test_top_shows_another_instances_release_on_the_host(
    slot_env, profiles_dir, docker_engine, tmp_path
) -> None:
    assert up(slot_env, "t-good").returncode == 0
    other = {
        "DEPLOYTOOL_INSTANCE": os.environ["DEPLOYTOOL_INSTANCE"] + "-b",
        "DEPLOYTOOL_HOME": str(tmp_path / "b"),
    }
    theirs = run_cli(
        "up",
        "--cpu",
        "--profile",
        "t-good",
        "--skip-qualify",
        "--json",
        "--port",
        str(free_port()),
        "--profiles-dir",
        str(profiles_dir),
        env=other,
    )
    try:
        assert theirs.returncode == 0, theirs.stderr
        shown = run_cli("top", "--once", "--interval", "1", "--json")
        assert shown.returncode == 0, shown.stderr
        servers = {s["name"]: s for s in json.loads(shown.stdout)["servers"]}
        mine, b = servers["cpu"], servers[f"cpu of instance {other['DEPLOYTOOL_INSTANCE']}"]
        assert (mine["release"], b["release"], b["url"]) == (1, 1, json.loads(theirs.stdout)["url"])
        assert mine["simulator"] is True and b["simulator"] is True and b["profile"] == "t-good"
        assert b["figures"]["why"] is None and b["figures"]["running"] is not None  # its /metrics read
    finally:
        run_cli("down", "--cpu", "--volumes", env=other)
