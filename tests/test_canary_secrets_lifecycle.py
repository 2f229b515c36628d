"""Canary secrets through the lifecycle, on the real engine with real `docker compose`: an API
key and a hub token with values found nowhere else go through render, build (the canaries in
its environment), up (CPU slot, reference runtime), qualify (of the slot, and of its URL with
the key in DEPLOYTOOL_API_KEY), bench of the slot, a second up that takes over (the first
drains), rollback, a failing up, refused profiles (a key in the launch command, a key pasted
where its reference belongs, a URL with credentials) and `render --k8s`. Then every file under
the state and report folders, the Kubernetes files, every container's `docker inspect` (labels,
env, command) and logs, its image's inspect and history (where build arguments show), and all
stdout, stderr and --json output are searched: no canary anywhere. The one place a value is, by
design, is the container's /run/secrets (compose's copy, not a host file)."""

from __future__ import annotations

import contextlib
import json
import secrets as stdlib_secrets
import stat
import subprocess
from pathlib import Path

import pytest
from conftest import free_port, run_cli
from lifecycle_helpers import health_check, remove_instance

pytestmark = pytest.mark.docker

KEY = "CANARYKEY" + stdlib_secrets.token_hex(10)
TOKEN = "hf_CANARYTOKEN" + stdlib_secrets.token_hex(10)
# the startup time is in the image's command, so a value of this run's own makes `build` build
BASE = f"""\
name: t36-base
extends: sim
server:
  args:
    startup-seconds: 0.1{stdlib_secrets.randbelow(10**6):06d}
    decode-tps: 2000
health: {health_check(20)}
bench:
  quick:
    warmup_output_tokens: 8
    decode_requests: 2
    decode_output_tokens: 40
    load_concurrency: [2]
    load_requests_per_slot: 1
    load_output_tokens: 40
    prefill_prompt_tokens: [2000]
    prefill_prompts_each: 1
"""
QUICK = ("--suite", "preflight", "--suite", "contract")
IMAGE = "registry.example/deploytool/sim@sha256:" + "c" * 64


@pytest.fixture
def made_images(docker_engine):
    """The images this test made, removed after the containers that use them."""
    made: set[str] = set()
    yield made
    for ref in made:
        with contextlib.suppress(Exception):
            docker_engine.client.images.remove(ref)


@pytest.fixture
def world(docker_engine, tmp_path: Path, made_images):
    folder = tmp_path / "profiles"
    folder.mkdir()
    token_file = tmp_path / "hf-token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    keyed = f"server:\n  api_key: {{env: T36_API_KEY}}\nsecrets:\n  hf_token: {{file: {token_file}}}\n"
    texts = {
        "t36-base": BASE,
        "t36-keyed": f"name: t36-keyed\nextends: t36-base\n{keyed}",
        "t36-keyed2": "name: t36-keyed2\nextends: t36-keyed\nserver:\n  args:\n    decode-tps: 3000\n",
        "t36-crash": "name: t36-crash\nextends: t36-keyed\nserver:\n  env: {DEPLOYTOOL_SIM_FAULT: crash_on_start}\n",
        "t36-key-in-command": (
            "name: t36-key-in-command\nextends: t36-base\nserver:\n  command: "
            f"[/opt/venv/bin/python, -m, deploytool.sim, --api-key={KEY}]\n"
        ),
        "t36-key-pasted": f"name: t36-key-pasted\nextends: t36-base\nserver:\n  api_key: {KEY}\n",
    }
    for name, text in texts.items():
        (folder / f"{name}.yaml").write_text(text)
    yield folder
    remove_instance(docker_engine)


def test_canary_secrets_reach_no_file_label_log_or_output(
    world, docker_engine, tmp_path, deploytool_home, made_images
):
    port = free_port()
    outputs: list[str] = []
    env = {"T36_API_KEY": KEY, "DEPLOYTOOL_PROFILES_PATH": str(world)}

    def run(*args: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        done = run_cli(*args, env={**env, **(extra_env or {})}, timeout=300)
        # what the command printed (its arguments hold a canary on purpose in one case)
        outputs.append(f"deploytool {args[0]} #{len(outputs)}\n{done.stdout}\n{done.stderr}")
        return done

    assert run("render", "--cpu", "--profile", "t36-keyed", "--image", "x:y").returncode == 0
    built = run(
        "build", "--profile", "t36-keyed", "--json", extra_env={"HF_TOKEN": TOKEN, "DEPLOYTOOL_API_KEY": KEY}
    )
    assert built.returncode == 0, built.stderr
    assert json.loads(built.stdout)["built"] is True  # a real build, not the no-op of an earlier run's image
    image = json.loads(built.stdout)["image"]
    made_images.add(image)
    up = run("up", "--cpu", "--profile", "t36-keyed", "--port", str(port), "--json", *QUICK)
    assert up.returncode == 0, up.stderr
    url = f"http://127.0.0.1:{port}"
    slot_qualify = run("qualify", "--cpu", "--suite", "contract", "--json", "--report", str(tmp_path / "q1"))
    assert slot_qualify.returncode == 0, slot_qualify.stderr
    url_qualify = run(
        "qualify",
        "--url",
        url,
        "--suite",
        "contract",
        "--json",
        "--report",
        str(tmp_path / "q2"),
        extra_env={"DEPLOYTOOL_API_KEY": KEY},
    )
    assert url_qualify.returncode == 0, url_qualify.stderr
    bench = run("bench", "--cpu", "--quick", "--repeats", "1", "--json")
    assert bench.returncode == 0, bench.stderr
    assert json.loads(bench.stdout)["environment"]["target"]

    # a second release takes over (the first drains and stops), then rollback brings the first back
    second = run("up", "--cpu", "--profile", "t36-keyed2", "--port", str(port), "--json", "--skip-qualify")
    assert second.returncode == 0, second.stderr
    assert [d["release"] for d in json.loads(second.stdout)["drains"]] == [
        1
    ]  # the hand-over drained release 1
    back = run("rollback", "--cpu", "--json")
    assert back.returncode == 0, back.stderr
    assert (json.loads(back.stdout)["release"], json.loads(back.stdout)["stopped"]) == (1, 2)

    failing = run("up", "--cpu", "--profile", "t36-crash", "--port", str(port), "--json", "--skip-qualify")
    assert failing.returncode != 0 and "error" in json.loads(failing.stdout)
    for name in ("t36-key-in-command", "t36-key-pasted"):
        refused = run("up", "--cpu", "--profile", name, "--port", str(port), "--json")
        assert refused.returncode == 2 and "not valid" in json.loads(refused.stdout)["error"]["message"]
        assert run("profiles", "show", name).returncode == 2
    credentials = run("qualify", "--url", f"http://user:{KEY}@127.0.0.1:{port}", "--json")
    assert credentials.returncode == 2 and "credentials" in credentials.stdout
    k8s = run(
        "render",
        "--k8s",
        "--profile",
        "t36-keyed",
        "--image",
        IMAGE,
        "--qualify-image",
        IMAGE,
        "-o",
        str(tmp_path / "k8s"),
    )
    assert k8s.returncode == 0, k8s.stderr
    run("status", "--json")
    run("journal", "--cpu", "--json")

    # the release's record names its secrets (0600); compose.yaml follows the umask (0644 here)
    from deploytool.release.state import release_path

    release = release_path("cpu", 1)
    assert stat.S_IMODE((release / "release.json").stat().st_mode) == 0o600
    assert stat.S_IMODE((release / "compose.yaml").stat().st_mode) & 0o077 != 0o077
    box = docker_engine.client.containers.get(docker_engine.release("cpu", 1).container_id)
    assert box.exec_run(["cat", "/run/secrets/hf_token"])[1].decode() == TOKEN  # handed over, by design

    artifacts: dict[str, str] = {}
    for root in (deploytool_home, tmp_path / "q1", tmp_path / "q2", tmp_path / "k8s"):
        for path in root.rglob("*"):
            if path.is_file() and "cache" not in path.relative_to(root).parts[:1]:
                artifacts[str(path)] = path.read_text(errors="replace")
    for i, text in enumerate(outputs):
        artifacts[f"output {i}: {text.splitlines()[0]}"] = text
    from deploytool.host import labels

    images: set[str] = set()
    for c in docker_engine.client.containers.list(
        all=True, filters={"label": f"{labels.INSTANCE}={labels.instance()}"}
    ):
        artifacts[f"docker inspect {c.name}"] = json.dumps(c.attrs)
        artifacts[f"docker logs {c.name}"] = c.logs().decode(errors="replace")
        images.add(c.attrs["Image"])
    assert len(images) >= 2  # the first release's image, the second's (and the crashing one's)
    made_images.update(images | {image})
    for ref in images | {image}:
        built_image = docker_engine.client.images.get(ref)
        artifacts[f"docker image inspect {ref}"] = json.dumps(built_image.attrs)
        artifacts[f"docker history {ref}"] = json.dumps(built_image.history())
    for kind in (
        "compose.yaml",
        "journal.jsonl",
        "results.json",
        "report.html",
        "report.md",
        "1-canary.yaml",
    ):
        assert any(p.endswith(kind) for p in artifacts), kind
    assert any(
        "/reports/bench-" in p and p.endswith("results.json") for p in artifacts
    )  # the bench's own report
    assert any(p.startswith("docker inspect") for p in artifacts)
    leaks = [where for where, text in artifacts.items() if KEY in text or TOKEN in text]
    assert leaks == []
