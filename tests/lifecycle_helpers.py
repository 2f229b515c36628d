"""What the lifecycle tests share: the test profiles (a fast reference runtime, one that never
gets healthy, one that crashes), the fixtures that run the real CLI against them on a free
port and remove what they started, and readers of what a slot serves."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest
from conftest import free_port, remove_this_instance, run_cli


def health_check(start_period: int = 30) -> str:
    """The health check of the test profiles that start a release, as the profile's flow mapping.

    Its `interval` paces the engine's probes only once a release has answered healthy
    (start_interval paces them until then, and again after every start of a stopped container,
    which the engine marks `starting`). No test reads the engine's health of a release after its
    first healthy answer: the health gate waits for that answer, watch and the monitor probe
    /health themselves, and a healthy status stays so without probes. Each probe is a `docker
    exec` of curl, about 0.1 s of the machine's CPU (runc, the shim, the engine, curl): at 2 s
    they took 5% of a core for every running release, for nothing a test looks at. The health
    budget (start_period + (retries - 1) x interval) grows with it: only a release that
    never answers waits it out, and the profiles that test that (t-never) keep their own."""
    return f"{{start_period: {start_period}, start_interval: 1, interval: 30, timeout: 2, retries: 2}}"


# The engine's first probe of a new container comes one start_interval (1 s, the schema's least)
# after its start, the next a second later. The simulator's interpreter takes 0.4 s to listen on
# an idle machine and 0.7 s or more on a busy one; a warm-up of 0.5 s on top then missed that first
# probe, and the `up` waited a second more. 0.1 s keeps a warm-up (a 503 before the 200).
STARTUP_S = 0.1

PROFILES = {
    "t-good": f"""\
name: t-good
extends: sim
description: fast-starting reference runtime for tests
server:
  args:
    startup-seconds: {STARTUP_S}
    decode-tps: 2000
health: """
    + health_check()
    + "\n",
    "t-good2": "name: t-good2\nextends: t-good\nserver:\n  args:\n    decode-tps: 3000\n",
    "t-never": """\
name: t-never
extends: t-good
server:
  env: {DEPLOYTOOL_SIM_FAULT: never_ready}
health: {start_period: 2, start_interval: 1, interval: 1, timeout: 1, retries: 1}
""",
    "t-crash": "name: t-crash\nextends: t-good\nserver:\n  env: {DEPLOYTOOL_SIM_FAULT: crash_on_start}\n",
}


@pytest.fixture
def profiles_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "profiles"
    folder.mkdir()
    for name, text in PROFILES.items():
        (folder / f"{name}.yaml").write_text(text)
    return folder


@pytest.fixture
def slot_env(docker_engine, profiles_dir: Path):
    """Run commands against this test's profiles and a free port; remove what they started."""
    port = free_port()

    def cli(
        *args: str, timeout: float = 300, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        extra = (
            ["--profiles-dir", str(profiles_dir)] if args[0] in ("up", "build", "render", "rollout") else []
        )
        if args[0] == "up" and "--port" not in args:
            extra += ["--port", str(port)]
        return run_cli(*args, *extra, timeout=timeout, env=env)

    cli.port = port  # type: ignore[attr-defined]
    yield cli
    remove_instance(docker_engine)


def remove_instance(engine) -> None:
    remove_this_instance(engine.client)


def throwaways_left(engine) -> list[str]:
    """The names of this instance's script containers (Engine.run_throwaway) on the engine."""
    from deploytool.host import labels

    mine = {"label": f"{labels.THROWAWAY}={labels.instance()}"}
    # sparse: the listing's own fields (no inspect of each), where the names are a list
    return [
        c.attrs["Names"][0].lstrip("/")
        for c in engine.client.containers.list(all=True, sparse=True, filters=mine)
    ]


def up(cli, profile: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return cli("up", "--cpu", "--profile", profile, "--skip-qualify", "--json", *extra)


def slot_status() -> dict:
    out = run_cli("status", "--json")
    assert out.returncode == 0, out.stderr
    slots = json.loads(out.stdout)["slots"]
    return {s["slot"]: s for s in slots}["cpu"]


def release_row(status: dict, number: int) -> dict:
    return next(r for r in status["releases"] if r["release"] == number)


def served_decode_tps(port: int) -> float:
    info = httpx.get(f"http://127.0.0.1:{port}/get_server_info", timeout=5).json()
    return float(info["sim_settings"]["decode_tps"])
