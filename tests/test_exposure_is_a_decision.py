"""Exposure is a decision: a server published beyond loopback without an API key is refused
unless the person says so (`--expose-without-key`, then labelled and journaled); the reference
runtime on its own listens on loopback; hooks get only what they document, from a folder only
its owner may write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import free_port, run_cli

from deploytool.deploy.executor import _journal_start
from deploytool.deploy.hooks import GatewayHooks, hooks_folder
from deploytool.deploy.steps import Plan
from deploytool.errors import UsageError
from deploytool.host import labels
from deploytool.sim.settings import SimSettings

NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}


def test_render_beyond_loopback_without_a_key_is_refused_with_the_ways_out():
    done = run_cli("render", "--cpu", "--profile", "sim", "--bind", "0.0.0.0", env=NO_ENGINE)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "without an API key" in done.stderr and "--expose-without-key" in done.stderr
    assert done.stdout == ""
    up = run_cli(
        "up",
        "--cpu",
        "--profile",
        "sim",
        "--bind",
        "0.0.0.0",
        "--port",
        str(free_port()),
        "--dry-run",
        "--json",
        env=NO_ENGINE,
    )
    assert up.returncode == 2 and "--expose-without-key" in json.loads(up.stdout)["error"]["hint"]


def test_saying_so_publishes_and_labels_the_release():
    done = run_cli(
        "render", "--cpu", "--profile", "sim", "--bind", "0.0.0.0", "--expose-without-key", env=NO_ENGINE
    )
    assert done.returncode == 0, done.stderr
    server = yaml.safe_load(done.stdout)["services"]["server"]
    assert server["ports"][0]["host_ip"] == "0.0.0.0"
    assert server["labels"][labels.EXPOSED_WITHOUT_KEY] == "true"
    loopback = run_cli("render", "--cpu", "--profile", "sim", env=NO_ENGINE)
    assert labels.EXPOSED_WITHOUT_KEY not in yaml.safe_load(loopback.stdout)["services"]["server"]["labels"]


def test_the_decision_is_journaled(deploytool_home):
    plan = Plan(
        action="up",
        slot="cpu",
        release=3,
        serving=None,
        fallback=None,
        steps=[],
        profile="sim",
        record={"bind": "0.0.0.0", "exposed_without_key": True},
    )
    _journal_start(plan)
    entries = [json.loads(x) for x in (deploytool_home / "journal.jsonl").read_text().splitlines()]
    assert any(
        e["event"] == "exposed_without_key" and e["bind"] == "0.0.0.0" and e["release"] == 3 for e in entries
    )


def test_the_reference_runtime_on_its_own_listens_on_loopback():
    assert SimSettings().host == "127.0.0.1"


def _hook(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o700)
    return path


def test_a_hook_gets_only_what_it_documents(tmp_path, monkeypatch, deploytool_home):
    hooks = tmp_path / "hooks"
    hooks.mkdir(mode=0o700)
    seen = tmp_path / "env.txt"
    _hook(hooks, "post-cutover", f"env > {seen}")
    monkeypatch.setenv("HF_TOKEN", "hf_canary_token_123")
    monkeypatch.setenv("DEPLOYTOOL_API_KEY", "sk-canary-key-123")
    monkeypatch.setenv("DEPLOYTOOL_SECRET_AUTH_HEADER", "Authorization: Bearer sk-canary-key-123")
    monkeypatch.setenv("SOME_GATEWAY_PASSWORD", "pw-canary-123")
    run = GatewayHooks(hooks).event(
        "post-cutover", slot="cpu", release=2, url="http://127.0.0.1:1", profile="sim"
    )
    assert run is not None and run.ok
    names = {line.split("=", 1)[0] for line in seen.read_text().splitlines() if "=" in line}
    assert {"DEPLOYTOOL_SLOT", "DEPLOYTOOL_RELEASE", "DEPLOYTOOL_URL", "PATH"} <= names
    assert not names & {
        "HF_TOKEN",
        "DEPLOYTOOL_API_KEY",
        "DEPLOYTOOL_SECRET_AUTH_HEADER",
        "SOME_GATEWAY_PASSWORD",
    }
    assert "canary" not in seen.read_text()


@pytest.mark.parametrize(
    "folder_mode, hook_mode", [(0o777, 0o700), (0o770, 0o700), (0o700, 0o757), (0o700, 0o775)]
)
def test_a_hooks_folder_or_hook_others_may_write_is_refused(tmp_path, folder_mode, hook_mode):
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    _hook(hooks, "pre-stop", "exit 0").chmod(hook_mode)
    hooks.chmod(folder_mode)
    with pytest.raises(UsageError, match="writable by") as caught:
        hooks_folder(hooks)
    assert "chmod go-w" in (caught.value.hint or "")
    hooks.chmod(0o700)
    (hooks / "pre-stop").chmod(0o700)
    assert hooks_folder(hooks) == hooks
