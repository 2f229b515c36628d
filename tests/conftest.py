"""Shared fixtures. Integration tests drive the real Docker engine and the real `docker
compose` plugin; when no engine is reachable they skip and say why, and the rest still runs.

Every test session gets its own DEPLOYTOOL_INSTANCE (test-<random>), so its containers,
compose projects and cache volumes can never touch a real deployment on the same engine.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BASE_IMAGE = "deploytool/base:bookworm"


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("DEPLOYTOOL_INSTANCE", f"test-{secrets.token_hex(3)}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that uses the engine (directly or through another fixture) is a docker test:
    marked from the fixture, so `-m "not docker"` never depends on someone remembering. The
    full GPU image downloads and installs gigabytes: opt-in only (`make gpu-image`)."""
    skip = None
    if os.environ.get("DEPLOYTOOL_GPU_IMAGE") != "1":
        skip = pytest.mark.skip(reason="builds the full GPU image (~4.8 GB of wheels, a 12.4 GB image): "
                                       "run `make gpu-image` (DEPLOYTOOL_GPU_IMAGE=1) to include it")
    for item in items:
        if "docker_engine" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.docker)
        if skip is not None and "gpu_image" in item.keywords:
            item.add_marker(skip)


def _engine_problem() -> str | None:
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as exc:  # any reason at all: no socket, no permission, no daemon
        return f"no Docker engine reachable ({type(exc).__name__}); see docs/install.md"
    proc = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
    if proc.returncode != 0:
        return "the docker compose v2 plugin is missing"
    try:
        client.images.get(BASE_IMAGE)
    except Exception:
        return f"base image {BASE_IMAGE} is missing (make base-image)"
    return None


_ENGINE_PROBLEM: str | None | bool = False


def engine_problem() -> str | None:
    global _ENGINE_PROBLEM
    if _ENGINE_PROBLEM is False:
        _ENGINE_PROBLEM = _engine_problem()
    return _ENGINE_PROBLEM  # type: ignore[return-value]


@pytest.fixture
def docker_engine():
    problem = engine_problem()
    if problem:
        pytest.skip(problem)
    from deploytool.host.engine import Engine

    return Engine()


def make_test_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh state directory whose cache is the one folder all tests share downloads through."""
    home = tmp_path_factory.mktemp("home")
    shared_cache = Path(os.environ.get("DEPLOYTOOL_TEST_CACHE", "/tmp/deploytool-test-cache"))
    shared_cache.mkdir(parents=True, exist_ok=True)
    (home / "cache").symlink_to(shared_cache)
    return home


@pytest.fixture(autouse=True)
def deploytool_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test its own state directory; downloads are shared through one cache folder."""
    home = make_test_home(tmp_path_factory)
    monkeypatch.setenv("DEPLOYTOOL_HOME", str(home))
    return home


@pytest.fixture(scope="module")
def module_home(tmp_path_factory: pytest.TempPathFactory):
    """The same for a module-scoped fixture (which runs before the per-test one): an image
    built once per module must not write to the real state directory or cache."""
    with pytest.MonkeyPatch.context() as patch:
        home = make_test_home(tmp_path_factory)
        patch.setenv("DEPLOYTOOL_HOME", str(home))
        yield home


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The real console script in a subprocess: exit codes, stdout and stderr as a user sees them."""
    return subprocess.run([sys.executable, "-m", "deploytool", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, cwd=ROOT)


@contextlib.contextmanager
def serve_app(app, what: str = "the test server", sock: socket.socket | None = None):
    """Serve an ASGI app with uvicorn on a free loopback port in a thread; yields its URL.
    `sock`: a socket already bound and not yet listening (a client meets a refused connection
    there until the server starts, as while a real server loads its weights)."""
    import threading
    import time

    import uvicorn

    if sock is None:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False,
                                           timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), f"{what} did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(5)
