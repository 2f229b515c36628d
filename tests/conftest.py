"""Shared fixtures. Integration tests drive the real Docker engine and the real `docker
compose` plugin; when no engine is reachable they skip and say why, and the rest still runs.

Every test session gets its own DEPLOYTOOL_INSTANCE (test-<random>), so its containers,
compose projects and cache volumes can never touch a real deployment on the same engine.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# Plugins, not imports: run_plan's hooks (the scheduler that runs the longest units first and keeps a
# file with a built image on one worker, the sglang environments made beside the workers, the
# timings kept for the next run) and lifecycle_helpers' fixtures (profiles_dir, slot_env) reach
# pytest by registration. Imported by name into this module they read as unused to a linter, whose
# fix once dropped the scheduler's hooks without a test failing (tests/test_suite_plugins.py).
pytest_plugins = ("run_plan", "lifecycle_helpers")

ROOT = Path(__file__).resolve().parents[1]
BASE_IMAGE = "deploytool/base:bookworm"


# What a person's shell may set for their own deploytool that the suite reads for itself (the
# shared download cache, opt-in image tests, the wheel index for those): everything else of
# DEPLOYTOOL_* is theirs (an instance, a state directory, profiles, hooks, a stand-in NVML host)
# and would steer the tests onto their releases or off the host the tests describe.
_SUITE_VARIABLES = {
    "DEPLOYTOOL_TEST_CACHE",
    "DEPLOYTOOL_GPU_IMAGE",
    "DEPLOYTOOL_GPU_WHEELHOUSE",
    "DEPLOYTOOL_TORCH_INDEX_URL",
    "DEPLOYTOOL_GPU_CHECK_CACHE",
    "DEPLOYTOOL_TEST_NO_FORKSERVER",
}


def pytest_configure(config: pytest.Config) -> None:
    # The controller picks the run's name and its xdist workers inherit it; each worker runs docker
    # tests beside the others, so each gets its own name (containers, volumes, networks, slots).
    # The controller always picks a new one: a person's DEPLOYTOOL_INSTANCE names their releases.
    if not hasattr(config, "workerinput"):
        for name in [n for n in os.environ if n.startswith("DEPLOYTOOL_") and n not in _SUITE_VARIABLES]:
            del os.environ[name]
        os.environ["DEPLOYTOOL_INSTANCE"] = f"test-{secrets.token_hex(3)}"
        # so are their own profiles and hooks ($XDG_CONFIG_HOME/deploytool): the run's is empty
        os.environ["XDG_CONFIG_HOME"] = config._deploytool_config_home = tempfile.mkdtemp(
            prefix="deploytool-test-config-"
        )
    worker = getattr(config, "workerinput", {}).get("workerid")
    if worker:
        os.environ["DEPLOYTOOL_INSTANCE"] += f"-{worker}"


def pytest_unconfigure(config: pytest.Config) -> None:
    # the run's config home (what chromium and matplotlib wrote there too) goes with the run:
    # a machine that runs the suite often keeps nothing of it
    home = getattr(config, "_deploytool_config_home", None)
    if home:
        shutil.rmtree(home, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that uses the engine (directly or through another fixture) is a docker test, and
    one that uses the sglang environments needs a package index once: marked from the fixtures,
    so `-m "not docker"` never depends on someone remembering. The
    full GPU image downloads and installs gigabytes: opt-in only (`make gpu-image`)."""
    skip = None
    if os.environ.get("DEPLOYTOOL_GPU_IMAGE") != "1":
        skip = pytest.mark.skip(
            reason="builds the full GPU image (~4.8 GB of wheels, a 12.4 GB image): "
            "run `make gpu-image` (DEPLOYTOOL_GPU_IMAGE=1) to include it"
        )
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "docker_engine" in fixtures:
            item.add_marker(pytest.mark.docker)
        if "sglang_parser_python" in fixtures:  # directly or through sglang_referee_python
            item.add_marker(pytest.mark.index)
        if skip is not None and "gpu_image" in item.keywords:
            item.add_marker(skip)
    # run_plan.py: under xdist, the files longest first (the plugin, not an import: see above)
    config.pluginmanager.get_plugin("run_plan").order_and_report(config, items)


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


_ENGINE_PROBLEM: str | bool | None = False


def engine_problem() -> str | None:
    global _ENGINE_PROBLEM
    if _ENGINE_PROBLEM is False:
        _ENGINE_PROBLEM = _engine_problem()
    return _ENGINE_PROBLEM  # type: ignore[return-value]


@pytest.fixture(scope="session", autouse=True)
def _nothing_of_this_run_left_on_the_engine():
    """After the session: whatever of this run's instance a test left on the engine (a test that
    failed before its own clean-up) goes, so the engine holds nothing of the run afterwards;
    only when a docker test ran here. Another instance's (a person's, another run's) is never
    touched: everything is found by this run's instance label."""
    yield
    if _ENGINE_PROBLEM is not None:  # no docker test ran in this process, or no engine
        return
    import docker

    remove_this_instance(docker.from_env(timeout=60), tolerant=True)


def remove_this_instance(client, *, tolerant: bool = False) -> None:
    """Every container, volume and network of this run's instance, found by its labels. A
    script's throwaway containers carry the instance under a label of their own (they are no
    release) and go with the releases, first: one that a test's Ctrl-C or kill left behind
    would hold a cache volume. Another instance's (a person's, another run's) is never touched.
    `tolerant`: what the engine refuses is left, not raised (the session's last sweep)."""
    import docker

    from deploytool.host import labels

    throwaway = {"label": f"{labels.THROWAWAY}={labels.instance()}"}
    mine = {"label": f"{labels.INSTANCE}={labels.instance()}"}
    refused = (docker.errors.APIError,) if tolerant else (docker.errors.NotFound,)
    for container in [
        *client.containers.list(all=True, filters=throwaway),
        *client.containers.list(all=True, filters=mine),
    ]:
        with contextlib.suppress(*refused):
            container.remove(force=True)
    for volume in client.volumes.list(filters=mine):
        with contextlib.suppress(*refused):
            volume.remove(force=True)
    for network in client.networks.list(filters=mine):
        with contextlib.suppress(*refused):
            network.remove()


@pytest.fixture
def docker_engine():
    problem = engine_problem()
    if problem:
        pytest.skip(problem)
    from deploytool.host.engine import Engine

    return Engine()


def shared_test_cache() -> Path:
    """The one folder all tests share downloads and built environments through."""
    shared_cache = Path(os.environ.get("DEPLOYTOOL_TEST_CACHE", "/tmp/deploytool-test-cache"))
    shared_cache.mkdir(parents=True, exist_ok=True)
    return shared_cache


def make_test_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh state directory whose cache is the one folder all tests share downloads through."""
    home = tmp_path_factory.mktemp("home")
    (home / "cache").symlink_to(shared_test_cache())
    return home


@contextlib.contextmanager
def _home_for(tmp_path_factory: pytest.TempPathFactory):
    with pytest.MonkeyPatch.context() as patch:
        home = make_test_home(tmp_path_factory)
        patch.setenv("DEPLOYTOOL_HOME", str(home))
        yield home


@pytest.fixture(scope="session", autouse=True)
def session_home(tmp_path_factory: pytest.TempPathFactory):
    """A state directory for the whole run, under every narrower one: a module- or session-scoped
    fixture (set up before the per-test home) never writes to the real state directory or cache."""
    with _home_for(tmp_path_factory) as home:
        yield home


@pytest.fixture(autouse=True)
def deploytool_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test its own state directory; downloads are shared through one cache folder."""
    home = make_test_home(tmp_path_factory)
    monkeypatch.setenv("DEPLOYTOOL_HOME", str(home))
    return home


@pytest.fixture(scope="module")
def module_home(tmp_path_factory: pytest.TempPathFactory):
    """The same for a module-scoped fixture (which runs before the per-test one): an image
    built once per module gets a state directory of its own."""
    with _home_for(tmp_path_factory) as home:
        yield home


# -- prepared environments: each made by the fixture that hands it out, never by an earlier test --
SGLANG = "0.5.23"  # the sglang whose own code the tests run on a CPU


@pytest.fixture(scope="session")
def sglang_parser_python(session_home: Path) -> Path:
    """The python of deploytool's parser venv for SGLANG (flagcheck.parser_venv: sglang without
    its dependencies, the parser's light imports, a CPU torch), made on first use in the shared
    test cache (about a minute; a package index once), reused by later runs. Under xdist the
    controller starts making it (and the referee's) as the run starts (run_plan.py)."""
    from deploytool.image.flagcheck import parser_venv

    return parser_venv(SGLANG)


@pytest.fixture(scope="session")
def sglang_referee_python(sglang_parser_python: Path) -> Path:
    """The parser venv extended with sglang's serving packages (deploytool.image.referee: its protocol
    models, parsers, config classes and transformers). Tests that need it skip, saying why, only
    where it cannot be built (no package index and nothing cached)."""
    from deploytool.errors import DeploytoolError
    from deploytool.image.referee import referee_python

    try:
        return referee_python(SGLANG)
    except DeploytoolError as exc:
        pytest.skip(f"sglang's referee environment cannot be built here: {exc.message.splitlines()[0]}")


@pytest.fixture(scope="session")
def sglang_cpu_wheelhouse(session_home: Path) -> Path:
    """Every wheel of the sglang CPU test profile (tests/profiles_sglang), ~550 MB with torch
    from local disk, downloaded once into the shared test cache: a worker that needs it while
    another fills it waits for that one."""
    from filelock import FileLock

    from deploytool.image.recipes import sglang as recipe
    from deploytool.profiles import ProfileStore
    from deploytool.release.state import cache_dir

    profile = ProfileStore([ROOT / "tests" / "profiles_sglang"]).get("sglang-cpu-test")
    house = cache_dir("wheelhouse", f"{profile.name}-py{profile.image.python}")
    with FileLock(f"{house}.lock"):
        if not (house / ".complete").exists():
            recipe.fill_wheelhouse(profile, house)
            (house / ".complete").write_text("ok\n")
    return house


# Ports for servers the tests start, below the kernel's ephemeral range (32768 and up) and
# SGLang's default 30000, so a client's outgoing connection never takes one between the test
# choosing it and a container publishing it; xdist worker k of n takes only ports = k (mod n),
# so two workers never pick the same one.
_PORTS = range(20000, 30000)
_port_draws = secrets.randbelow(len(_PORTS))


def free_port() -> int:
    """A loopback port nothing listens on now, of this worker's share."""
    global _port_draws
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:])
    share = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    slots = len(_PORTS) // share
    for _ in range(slots):
        _port_draws += 1
        port = _PORTS.start + (_port_draws % slots) * share + worker
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:  # someone's, or a closed one still in TIME_WAIT
                continue
            return port
    raise RuntimeError(f"no free loopback port in {_PORTS.start}-{_PORTS.stop - 1}")


@contextlib.contextmanager
def hold_port(port: int, bind: str = "127.0.0.1"):
    """The port busy for the block, whoever holds it: a socket of the test's own listens there,
    unless something of the host's already does (then it is busy all the same). A test of what
    deploytool says about a taken default port owns that state instead of hoping for a free one."""
    with socket.socket() as sock:
        try:
            sock.bind((bind, port))
            sock.listen()
        except OSError:
            pass  # already held by another listener: the port is just as busy
        yield port


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """The real console script in a process of its own: exit codes, stdout and stderr as a user
    sees them. Forked from a server that has made the CLI's imports once (cli_forkserver.py:
    `python -m deploytool` in every other way); DEPLOYTOOL_TEST_NO_FORKSERVER=1 starts each
    command in a new interpreter instead."""
    import cli_forkserver

    return cli_forkserver.run(list(args), {**os.environ, **(env or {})}, ROOT, timeout)


def run_clis(
    *commands: tuple[str, ...], envs: list[dict[str, str] | None] | None = None, timeout: float = 300
) -> list[subprocess.CompletedProcess[str]]:
    """Several commands of the console script at once (`envs`: each one's extra variables), for
    a fixture that prepares independent slots: their waits (a container start, a health check)
    overlap instead of adding up, as two people's commands on two slots of one host do (each
    slot has its own lock)."""
    from concurrent.futures import ThreadPoolExecutor

    extra = envs or [None] * len(commands)
    with ThreadPoolExecutor(len(commands)) as pool:
        return list(pool.map(lambda args, env: run_cli(*args, env=env, timeout=timeout), commands, extra))


def start_cli(*args: str) -> subprocess.Popen[str]:
    """The console script started as from a terminal, for tests that press Ctrl-C on it.

    A suite started in the background by a script (`nohup make test &`) inherits SIGINT
    ignored, and Python keeps an ignored SIGINT ignored: the CLI would never see the Ctrl-C
    these tests send. The child gets SIGINT's default back, as a terminal's foreground job has."""
    return subprocess.Popen(
        [sys.executable, "-m", "deploytool", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


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
    server = uvicorn.Server(
        uvicorn.Config(
            app, lifespan="off", log_level="warning", access_log=False, timeout_graceful_shutdown=1
        )
    )
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
