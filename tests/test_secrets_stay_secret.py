"""Secrets stay secret: no key on a launch command line in any spelling, no `$` in a compose
file that compose could fill from its own environment (which holds the secret values at `up`),
the values a process holds scrubbed from whatever it writes or prints, no credentials in a URL,
no secret echoed by a validation error, and files that follow the umask except those that name
a secret (0600)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import yaml
from conftest import run_cli

from deploytool import redaction
from deploytool.checks.targets import TargetRequest, resolve_target
from deploytool.errors import ProfileError, UsageError
from deploytool.files import write_atomic, write_json
from deploytool.host.slots import Slot
from deploytool.profiles import ProfileStore, SecretRef
from deploytool.release.compose import RenderRequest, render_compose, write_compose

CANARY = "sk-canary-7f3a9e21d4"
NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}


@pytest.fixture(autouse=True)
def _fresh_process():
    redaction.forget_all()
    yield
    redaction.forget_all()


def _child(folder: Path, body: str, name: str = "child") -> ProfileStore:
    (folder / f"{name}.yaml").write_text(f"name: {name}\nextends: sim\n{body}")
    return ProfileStore([folder])


@pytest.mark.parametrize(
    "body",
    [
        "server:\n  command: [/opt/venv/bin/python, -m, deploytool.sim, --api-key, K]\n",
        f"server:\n  command: [/opt/venv/bin/python, -m, deploytool.sim, --api-key={CANARY}]\n",
        "server:\n  command: [/opt/venv/bin/python, -m, deploytool.sim, --admin-api-key, K]\n",
        "server:\n  args: {--api-key: K}\n",
        "server:\n  args: {api_key: K}\n",
        "server:\n  args: {--api_key: K}\n",
        "server:\n  args: {admin-api-key: K}\n",
        "server:\n  args: {served-model-name: [m, --api-key, K]}\n",
    ],
)
def test_a_key_anywhere_in_the_launch_argv_is_refused_with_the_fix(tmp_path, body):
    with pytest.raises(ProfileError) as caught:
        _child(tmp_path, body).get("child")
    assert "server.api_key: {env: NAME} or {file: PATH}" in caught.value.message
    assert CANARY not in caught.value.message


def test_a_value_that_only_reads_like_a_flag_name_is_not_refused(tmp_path):
    store = _child(tmp_path, "server:\n  args: {served-model-name: api-key}\n")
    assert store.get("child").server.args["served-model-name"] == "api-key"


def test_the_render_refuses_a_key_flag_in_a_profile_built_in_code():
    profile = ProfileStore().get("sim").model_copy(deep=True)
    profile.server.command = [*profile.server.command, "--api-key", CANARY]
    with pytest.raises(UsageError, match=r"server.command"):
        render_compose(RenderRequest(profile=profile, slot=Slot(), release=1, image="deploytool/sim:x"))


def test_every_value_in_the_compose_document_is_dollar_escaped():
    profile = ProfileStore().get("sim").model_copy(deep=True)
    profile.server.env["GREETING"] = "${DEPLOYTOOL_SECRET_HF_TOKEN}"
    profile.server.args["served-model-name"] = "$DEPLOYTOOL_SECRET_AUTH_HEADER"
    doc = render_compose(RenderRequest(profile=profile, slot=Slot(), release=1, image="deploytool/sim:x"))
    server = doc["services"]["server"]
    assert server["environment"]["GREETING"] == "$${DEPLOYTOOL_SECRET_HF_TOKEN}"
    assert "$$DEPLOYTOOL_SECRET_AUTH_HEADER" in server["command"]


def test_the_watch_service_compose_file_is_escaped_too(tmp_path):
    from deploytool.deploy.watch_install import watch_compose

    doc = watch_compose("deploytool:x", hooks_dir=tmp_path / "$HOME-hooks", state_dir=tmp_path)
    volumes = doc["services"]["watch"]["volumes"]
    assert any(v["source"] == str(tmp_path / "$$HOME-hooks") for v in volumes)


def test_compose_cannot_fill_a_value_from_its_secret_environment(tmp_path, docker_engine, monkeypatch):
    """`docker compose up` runs with DEPLOYTOOL_SECRET_* in its environment: the plugin's own
    reading of the file keeps a profile's `${...}` literal."""
    monkeypatch.setenv("DEPLOYTOOL_SECRET_HF_TOKEN", CANARY)
    profile = ProfileStore().get("sim").model_copy(deep=True)
    profile.server.env["GREETING"] = "${DEPLOYTOOL_SECRET_HF_TOKEN}"
    profile.server.args["served-model-name"] = "x$DEPLOYTOOL_SECRET_HF_TOKEN"
    path = write_compose(
        RenderRequest(profile=profile, slot=Slot(), release=1, image="deploytool/sim:x"),
        tmp_path / "compose.yaml",
    )
    normalized = docker_engine.compose_config(path)
    assert CANARY not in normalized
    server = yaml.safe_load(normalized)["services"]["server"]
    # the plugin prints a literal `$` escaped again, ready to be read back
    assert server["environment"]["GREETING"].replace("$$", "$") == "${DEPLOYTOOL_SECRET_HF_TOKEN}"


def test_a_held_value_is_scrubbed_from_files_json_and_the_journal(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPLOYTOOL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("T_KEY", CANARY)
    assert SecretRef(env="T_KEY").resolve(what="test") == CANARY
    write_atomic(tmp_path / "a.txt", f"the server said: {CANARY}")
    write_json(
        tmp_path / "b.json",
        {
            "error": f"401 for key {CANARY}",
            "argv": ["--api-key", "other-key-123"],
            "api_key": {"env": "T_KEY"},
        },
    )
    from deploytool.release.state import journal

    journal("test", message=f"failed with {CANARY}")
    for path in (tmp_path / "a.txt", tmp_path / "b.json", tmp_path / "home" / "journal.jsonl"):
        text = path.read_text()
        assert CANARY not in text and redaction.REDACTED in text, path
    record = json.loads((tmp_path / "b.json").read_text())
    assert record["api_key"] == {"env": "T_KEY"}  # a reference is kept: it is where, not what


def test_a_held_value_is_scrubbed_in_its_html_and_json_spellings(tmp_path):
    odd = 'k<&>"\\ey-123456'
    redaction.hold(odd)
    import html

    write_atomic(tmp_path / "r.html", f"<p>{html.escape(odd)}</p>")
    write_atomic(tmp_path / "r.json", json.dumps({"said": odd}))
    for path in (tmp_path / "r.html", tmp_path / "r.json"):
        text = path.read_text()
        assert (
            html.escape(odd) not in text and json.dumps(odd)[1:-1] not in text and redaction.REDACTED in text
        )


def test_redact_takes_a_key_from_an_argv_list_and_a_url():
    redacted = redaction.redact(
        {
            "launch": ["sglang", "--api-key", "sk-abcdefgh", "--port", "1"],
            "url": "http://user:sk-abcdefgh@host:1/v1",
        }
    )
    assert "sk-abcdefgh" not in json.dumps(redacted)
    assert redacted["launch"][3:] == ["--port", "1"]


def test_the_old_import_of_redact_still_works():
    from deploytool.release.secrets import REDACTED, redact

    assert redact({"api_key": "x"}) == {"api_key": REDACTED}


def test_credentials_in_a_url_are_refused_clearly():
    with pytest.raises(UsageError) as caught:
        resolve_target(TargetRequest(url=f"http://user:{CANARY}@127.0.0.1:1"))
    assert "credentials" in caught.value.message and CANARY not in caught.value.message
    assert "--api-key-file" in (caught.value.hint or "")


def test_the_cli_never_prints_url_credentials_even_under_json():
    done = run_cli("qualify", "--url", f"http://user:{CANARY}@127.0.0.1:1", "--json", env=NO_ENGINE)
    assert done.returncode != 0
    assert CANARY not in done.stdout + done.stderr
    assert "credentials" in json.loads(done.stdout)["error"]["message"]


def test_a_validation_error_never_echoes_a_secret_field(tmp_path):
    (tmp_path / "leaky.yaml").write_text(
        f"name: leaky\nextends: sim\nserver:\n  api_key: {CANARY}\nsecrets:\n  hf_token: {CANARY}x\n"
    )
    with pytest.raises(ProfileError) as caught:
        ProfileStore([tmp_path]).get("leaky")
    assert "server.api_key" in caught.value.message and "secrets.hf_token" in caught.value.message
    assert CANARY not in caught.value.message
    done = run_cli(
        "profiles", "show", "leaky", "--json", env={**NO_ENGINE, "DEPLOYTOOL_PROFILES_PATH": str(tmp_path)}
    )
    assert done.returncode != 0 and CANARY not in done.stdout + done.stderr


def test_files_follow_the_umask_and_a_file_naming_a_secret_is_private(tmp_path):
    old = os.umask(0o027)
    try:
        plain = write_atomic(tmp_path / "compose.yaml", "x: 1\n")
        private = write_atomic(tmp_path / "release.json", "{}\n", private=True)
        compose = write_compose(
            RenderRequest(
                profile=ProfileStore().get("sim"), slot=Slot(), release=1, image="deploytool/sim:x"
            ),
            tmp_path / "r" / "compose.yaml",
        )
    finally:
        os.umask(old)
    assert stat.S_IMODE(plain.stat().st_mode) == 0o640
    assert stat.S_IMODE(compose.stat().st_mode) == 0o640
    assert stat.S_IMODE(private.stat().st_mode) == 0o600


def test_what_the_cli_prints_is_scrubbed(capsys):
    import io

    from deploytool.cli.app import ScrubbedStream, json_error

    redaction.hold(CANARY)
    raw = io.StringIO()
    ScrubbedStream(raw).write(f"container log: started with key {CANARY}\n")
    assert CANARY not in raw.getvalue() and redaction.REDACTED in raw.getvalue()
    json_error(f"the server said {CANARY}", f"hint {CANARY}", 1, "DeployError")
    printed = capsys.readouterr().out
    assert CANARY not in printed and json.loads(printed)["error"]["message"].endswith(redaction.REDACTED)
