"""Models, secrets and access on the real Docker engine with real `docker compose`:
a release serves a checked model folder or hub snapshot and says which; a missing checkpoint
fails before the serving release is stopped; a release with an API key refuses callers
without it, qualifies with it, and no artifact of the release holds the key or the hub token."""

from __future__ import annotations

import json
import secrets as stdlib_secrets
import subprocess
from pathlib import Path

import httpx
import pytest
from conftest import free_port, run_cli
from fake_checkpoints import write_hub_cache, write_model_folder
from lifecycle_helpers import health_check, remove_instance

from deploytool.host import labels
from deploytool.release import weights

pytestmark = pytest.mark.docker

BASE = f"""\
name: t13-base
extends: sim
server:
  args:
    startup-seconds: 0.1  # lands before the engine's first probe (lifecycle_helpers.STARTUP_S)
    decode-tps: 2000
health: {health_check()}
"""
QUICK = ("--suite", "preflight", "--suite", "contract")


@pytest.fixture
def env(docker_engine, tmp_path: Path):
    """A profiles folder, a free port and a CLI runner; removes what the test started."""
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "t13-base.yaml").write_text(BASE)
    port = free_port()
    extra_env: dict[str, str] = {}

    def profile(name: str, body: str) -> None:
        (folder / f"{name}.yaml").write_text(f"name: {name}\nextends: t13-base\n{body}")

    def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        extra = ["--profiles-dir", str(folder)] if args[0] in ("up", "render", "qualify", "bench") else []
        if args[0] == "up" and "--port" not in args:
            extra += ["--port", str(port)]
        return run_cli(*args, *extra, timeout=timeout, env=extra_env)

    cli.profile, cli.port, cli.env = profile, port, extra_env  # type: ignore[attr-defined]
    yield cli
    remove_instance(docker_engine)


def status_row(cli, number: int) -> dict:
    out = cli("status", "--json")
    assert out.returncode == 0, out.stderr
    slot = {s["slot"]: s for s in json.loads(out.stdout)["slots"]}["cpu"]
    return next(r for r in slot["releases"] if r["release"] == number) | {"_current": slot["current"]}


def container(docker_engine, number: int):
    release = docker_engine.release("cpu", number)
    assert release is not None
    return docker_engine.client.containers.get(release.container_id)


def test_model_folder_deploys_read_only_and_status_shows_its_fingerprint(env, docker_engine, tmp_path: Path):
    folder = write_model_folder(tmp_path / "ckpt" / "Tiny-Model")
    env.profile("t13-folder", f"model:\n  host_path: {folder}\n  path: null\n")  # default mount point
    one = env("up", "--cpu", "--profile", "t13-folder", "--json", *QUICK)
    assert one.returncode == 0, one.stderr
    fingerprint = weights.folder_fingerprint(folder)
    assert json.loads(one.stdout)["model"]["fingerprint"] == fingerprint
    row = status_row(env, 1)
    assert row["model"] == f"folder:{folder}#{fingerprint[7:23]}" and row["_current"] == 1
    human = env("status")
    assert f"folder:Tiny-Model#{fingerprint[7:15]}" in human.stdout  # the table shows it too

    box = container(docker_engine, 1)
    mount = next(m for m in box.attrs["Mounts"] if m["Destination"] == "/models/Tiny-Model")
    assert mount["Source"] == str(folder) and mount["RW"] is False
    code, out = box.exec_run(["cat", "/models/Tiny-Model/config.json"])
    assert code == 0 and json.loads(out) == json.loads((folder / "config.json").read_text())
    info = httpx.get(f"http://127.0.0.1:{env.port}/server_info", timeout=5).json()
    assert info["model_path"] == "/models/Tiny-Model"  # the server was given the mount point

    # New weights in the same folder: the next release says so in its contract figures.
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3", "hidden_size": 16}))
    two = env("up", "--cpu", "--profile", "t13-folder", "--json", *QUICK)
    assert two.returncode == 0, two.stderr
    report = Path(json.loads(two.stdout)["qualify"]["report_dir"])
    results = json.loads((report / "results.json").read_text())
    assert results["target"]["model"]["fingerprint"] == weights.folder_fingerprint(folder) != fingerprint
    contract = next(s for s in results["suites"] if s["name"] == "contract")["figures"]
    assert contract["weights_changed"] is True
    assert any("serves other weights than the previous release" in n for n in contract["notes"])
    assert "weights `folder:" in (report / "report.md").read_text()


def test_missing_model_folder_fails_before_the_serving_release_is_stopped(env, docker_engine, tmp_path: Path):
    env.profile("t13-ok", "")
    assert env("up", "--cpu", "--profile", "t13-ok", "--skip-qualify").returncode == 0
    missing = tmp_path / "not-copied-yet"
    env.profile("t13-missing", f"model:\n  host_path: {missing}\n")
    bad = env("up", "--cpu", "--profile", "t13-missing", "--skip-qualify")
    assert bad.returncode == 2
    assert f"model folder {missing} does not exist" in bad.stderr and "nothing was stopped" in bad.stderr
    assert httpx.get(f"http://127.0.0.1:{env.port}/v1/models", timeout=5).status_code == 200  # still serving
    row = status_row(env, 1)
    assert row["state"] == "running" and row["_current"] == 1
    assert [r.release for r in docker_engine.releases("cpu")] == [1]
    journal = env("journal", "--cpu", "--json")
    assert "release.stopped" not in [e["event"] for e in json.loads(journal.stdout)["entries"]]


def test_hub_model_mounts_the_cache_offline_and_records_the_commit(env, docker_engine, tmp_path: Path):
    commit = write_hub_cache(tmp_path / "hf" / "hub", "acme/tiny-model")
    env.env["DEPLOYTOOL_HF_HOME"] = str(tmp_path / "hf")
    env.profile("t13-hub", "model:\n  hub: acme/tiny-model\n")
    out = env("up", "--cpu", "--profile", "t13-hub", "--skip-qualify", "--json")
    assert out.returncode == 0, out.stderr
    model = json.loads(out.stdout)["model"]
    assert (model["repo"], model["revision"], model["commit"]) == ("acme/tiny-model", "main", commit)
    from deploytool.release.state import release_dir

    record = json.loads((release_dir("cpu", 1) / "release.json").read_text())
    assert record["model"]["commit"] == commit
    box = container(docker_engine, 1)
    assert box.labels[labels.MODEL] == f"hub:acme/tiny-model@{commit}"
    env_vars = dict(e.split("=", 1) for e in box.attrs["Config"]["Env"])
    assert env_vars["HF_HUB_OFFLINE"] == "1" and env_vars["HF_HUB_CACHE"] == weights.CONTAINER_HUB_CACHE
    mount = next(m for m in box.attrs["Mounts"] if m["Destination"] == weights.CONTAINER_HUB_CACHE)
    assert mount["Source"] == str(tmp_path / "hf" / "hub") and mount["RW"] is False
    snapshot = f"{weights.CONTAINER_HUB_CACHE}/models--acme--tiny-model/snapshots/{commit}/config.json"
    code, _ = box.exec_run(["test", "-r", snapshot])  # the snapshot's links resolve inside the mount
    assert code == 0
    info = httpx.get(f"http://127.0.0.1:{env.port}/server_info", timeout=5).json()
    assert info["model_path"] == "acme/tiny-model" and info["sim_settings"]["revision"] == commit
    assert status_row(env, 1)["model"] == f"hub:acme/tiny-model@{commit}"


def test_api_key_release_refuses_strangers_qualifies_and_leaks_nothing(
    env, docker_engine, tmp_path: Path, deploytool_home: Path
):
    key = "sk-" + stdlib_secrets.token_hex(16)
    token = "hf_" + stdlib_secrets.token_hex(16)
    token_file = tmp_path / "hf-token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    env.env["T13_API_KEY"] = key
    body = f"server:\n  api_key: {{env: T13_API_KEY}}\nsecrets:\n  hf_token: {{file: {token_file}}}\n"
    env.profile("t13-keyed", body)
    env.profile("t13-keyed2", body + "description: second\n")
    outputs = []

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        out = env(*args)
        outputs.append(out.stdout + out.stderr)
        return out

    rendered = run("render", "--cpu", "--profile", "t13-keyed", "--image", "x:y")
    assert rendered.returncode == 0 and "# secret sglang_config: host env T13_API_KEY" in rendered.stdout
    up = run("up", "--cpu", "--profile", "t13-keyed", "--json", *QUICK)
    assert up.returncode == 0, up.stderr
    assert json.loads(up.stdout)["qualify"]["passed"] is True

    url = f"http://127.0.0.1:{env.port}"
    refused = httpx.get(url + "/v1/models", timeout=5)
    assert refused.status_code == 401 and refused.json() == {"error": "Unauthorized"}
    assert (
        httpx.post(
            url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}, timeout=5
        ).status_code
        == 401
    )
    assert (
        httpx.get(url + "/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=5).status_code
        == 200
    )
    box = container(docker_engine, 1)
    assert box.attrs["State"]["Health"]["Status"] == "healthy"
    assert box.exec_run(["cat", "/run/secrets/hf_token"])[1].decode() == token
    env_vars = dict(e.split("=", 1) for e in box.attrs["Config"]["Env"])
    assert env_vars["HF_TOKEN_PATH"] == "/run/secrets/hf_token"
    assert box.labels[labels.API_KEY] == "required" and status_row(env, 1)["api_key"] == "required"

    # qualify and bench of the slot read the key again from where the release record says.
    qualify = run("qualify", "--cpu", "--suite", "contract", "--json", "--report", str(tmp_path / "q"))
    assert qualify.returncode == 0, qualify.stderr
    # A second release, then rollback: the stopped release keeps its secrets and serves again.
    assert run("up", "--cpu", "--profile", "t13-keyed2", "--skip-qualify", "--json").returncode == 0
    back = run("rollback", "--cpu", "--json")
    assert back.returncode == 0, back.stderr
    assert (
        httpx.get(url + "/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=5).status_code
        == 200
    )
    assert httpx.get(url + "/v1/models", timeout=5).status_code == 401
    run("status", "--json")
    run("journal", "--json")

    # Every artifact: the state folder (compose files, records, journal, reports), what each
    # command printed, the containers as the engine describes them, their logs.
    artifacts: dict[str, str] = {}
    for path in deploytool_home.rglob("*"):
        if path.is_file() and "cache" not in path.relative_to(deploytool_home).parts[:1]:
            artifacts[str(path)] = path.read_text(errors="replace")
    for path in (tmp_path / "q").rglob("*"):
        if path.is_file():
            artifacts[str(path)] = path.read_text(errors="replace")
    for i, text in enumerate(outputs):
        artifacts[f"command output {i}"] = text
    for release in docker_engine.releases("cpu"):
        c = docker_engine.client.containers.get(release.container_id)
        artifacts[f"docker inspect {c.name}"] = json.dumps(c.attrs)
        artifacts[f"docker logs {c.name}"] = c.logs().decode(errors="replace")
    assert any(p.endswith("compose.yaml") for p in artifacts) and any(
        p.endswith("journal.jsonl") for p in artifacts
    )
    assert any(p.endswith("results.json") for p in artifacts)
    leaks = [where for where, text in artifacts.items() if key in text or token in text]
    assert leaks == []
