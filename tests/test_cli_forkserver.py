"""The tests' `deploytool` commands forked from a server that made the CLI's imports once
(cli_forkserver.py) behave as `python -m deploytool` started afresh: the same exit code, stdout
and stderr, the environment and working directory they were given, a fresh interpreter where a
start-up variable differs, and subprocess.run's timeout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import cli_forkserver
import pytest
from conftest import ROOT

COMMANDS = [
    ["--help"],
    ["up", "--help"],
    ["up", "--bogus", "--json"],  # a usage error: exit 2, a JSON error on stdout
    ["no-such-command"],
    ["render", "--cpu", "--profile", "sim"],
    ["plan-memory", "--profile", "no-such-profile", "--json"],
    ["profiles", "list", "--json"],
]


def fresh(args: list[str], env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "deploytool", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )


def outcome(proc: subprocess.CompletedProcess[str]) -> tuple[int, str, str]:
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_forked_command_answers_as_a_fresh_interpreter(args: list[str]) -> None:
    env = dict(os.environ)
    forked = cli_forkserver.run(args, env, ROOT, 120)
    assert outcome(forked) == outcome(fresh(args, env))
    assert forked.args == [sys.executable, "-m", "deploytool", *args]


def test_each_command_gets_its_own_environment_and_folder(tmp_path: Path) -> None:
    # a profile only this command's DEPLOYTOOL_PROFILES_PATH names; run from another folder
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "only-here.yaml").write_text("name: only-here\nextends: sim\n")
    env = {**os.environ, "DEPLOYTOOL_PROFILES_PATH": str(tmp_path / "p")}
    args = ["profiles", "list", "--json"]
    forked = cli_forkserver.run(args, env, tmp_path, 120)
    assert "only-here" in forked.stdout
    assert outcome(forked) == outcome(fresh(args, env, tmp_path))
    # the next command, without the variable, does not see it: nothing stays in the server
    assert "only-here" not in cli_forkserver.run(args, dict(os.environ), ROOT, 120).stdout


def test_a_start_up_variable_that_differs_gets_an_interpreter_that_read_it() -> None:
    # rich reads the terminal width when deploytool's console is made, at import
    narrow, wide = ({**os.environ, "COLUMNS": width} for width in ("60", "160"))
    a, b = (
        cli_forkserver.run(["up", "--help"], narrow, ROOT, 120),
        cli_forkserver.run(["up", "--help"], wide, ROOT, 120),
    )
    assert a.stdout != b.stdout
    assert outcome(a) == outcome(fresh(["up", "--help"], narrow))
    assert outcome(b) == outcome(fresh(["up", "--help"], wide))


def test_a_command_past_its_timeout_is_killed_as_subprocess_run_kills_it() -> None:
    # `top` refreshes until Ctrl-C
    with pytest.raises(subprocess.TimeoutExpired) as raised:
        cli_forkserver.run(
            ["top", "--url", "http://127.0.0.1:9", "--interval", "0.2"], dict(os.environ), ROOT, 3
        )
    assert "deploytool" in raised.value.cmd
    server = next(s for s in cli_forkserver._servers.values() if s.proc.poll() is None)
    children = Path(f"/proc/{server.proc.pid}/task/{server.proc.pid}/children").read_text().split()
    assert children == []  # killed and reaped, nothing left running
