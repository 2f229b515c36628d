"""On the real engine: `tune --cpu-slot NAME` runs candidates as releases of a CPU slot through
up's plan and executor; the release that served on the slot before serves again afterwards —
after a finished search and after Ctrl-C in the middle of one — and no candidate container is
left behind.

Both tests search the one slot the module's `up` made: each begins and ends with its release
serving (which is what each asserts), so the second starts where a fresh `up` would leave it."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import httpx
import pytest
from conftest import engine_problem, free_port, run_cli, start_cli
from lifecycle_helpers import remove_instance
from tune_helpers import write_profile

pytestmark = pytest.mark.index  # the sim image's wheels are downloaded once (then cached)


def _slot(name: str) -> dict:
    out = run_cli("status", "--json")
    assert out.returncode == 0, out.stderr
    return {s["slot"]: s for s in json.loads(out.stdout)["slots"]}[f"cpu-{name}"]


def _containers(engine) -> list[str]:
    from deploytool.host import labels

    return sorted(
        c.name
        for c in engine.client.containers.list(
            all=True, filters={"label": f"{labels.INSTANCE}={labels.instance()}"}
        )
    )


@pytest.fixture(scope="module")
def _slot_up(module_home: Path, tmp_path_factory: pytest.TempPathFactory):
    """One `up` on the CPU slot for the module, in a state folder of its own."""
    problem = engine_problem()
    if problem:
        pytest.skip(problem)
    from deploytool.host.engine import Engine

    profiles = write_profile(
        tmp_path_factory.mktemp("tune-slot") / "profiles",
        tune={"flags": {"max-running-requests": [2, 8]}, "rounds": 1, "repeats": 1},
    )
    port = free_port()
    done = run_cli(
        "up",
        "--cpu-slot",
        "tn",
        "--profile",
        "tune-sim",
        "--profiles-dir",
        str(profiles),
        "--skip-qualify",
        "--port",
        str(port),
        "--json",
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    yield module_home, profiles, port, json.loads(done.stdout)["release"]
    remove_instance(Engine())


@pytest.fixture
def serving(_slot_up, docker_engine, monkeypatch: pytest.MonkeyPatch):
    """The module's slot, serving its release; this test's commands read the module's state folder."""
    home, profiles, port, release = _slot_up
    monkeypatch.setenv("DEPLOYTOOL_HOME", str(home))
    assert _slot("tn")["serving"] == release and _serves(port)  # as `up` left it
    return profiles, port, release


def _serves(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_search_on_the_slot_brings_the_serving_release_back(serving, docker_engine, tmp_path: Path) -> None:
    profiles, port, release = serving
    before = _containers(docker_engine)
    done = run_cli(
        "tune",
        "--profile",
        "tune-sim",
        "--profiles-dir",
        str(profiles),
        "--cpu-slot",
        "tn",
        "--report",
        str(tmp_path / "r"),
        "--no-qualify",
        "--json",
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(done.stdout)
    assert data["winner"] == "c01" and data["counts"]["started"] == 2
    assert all(Path(c["starts"][0]["log"]).read_text() for c in data["candidates"])
    slot = _slot("tn")
    assert slot["serving"] == release == slot["current"]
    assert _serves(port)
    assert _containers(docker_engine) == before


def test_ctrl_c_in_a_search_brings_the_serving_release_back(serving, docker_engine, tmp_path: Path) -> None:
    profiles, port, release = serving
    before = _containers(docker_engine)
    proc = start_cli(
        "tune",
        "--profile",
        "tune-sim",
        "--profiles-dir",
        str(profiles),
        "--cpu-slot",
        "tn",
        "--report",
        str(tmp_path / "r"),
        "--no-qualify",
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 600
    seen = ""
    while "starting on" not in seen and time.monotonic() < deadline:
        seen = proc.stderr.readline()
        assert seen or proc.poll() is None, "tune ended before it started a candidate"
    assert not _serves(port)  # the slot serves one container: the candidate's
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    slot = _slot("tn")
    assert slot["serving"] == release == slot["current"]
    assert _serves(port)
    assert _containers(docker_engine) == before
