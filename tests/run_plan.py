"""How the suite is spread over workers and what it says at its end (hooks, imported by conftest).

Under pytest-xdist (`make test` runs `-n 5`) the collection is cut into units of work, each
run whole on one worker:
- a docker test is a unit of its own, unless its file has a module-scoped fixture (a built
  image), which keeps the file together so the fixture is made once;
- every other file is one unit, for the same reason.
Docker tests run on every worker at once: each worker has its own DEPLOYTOOL_INSTANCE
(conftest), so its containers, volumes, networks and slots are its own, and its own share of
ports (conftest.free_port); an image two workers need is built by one while the other waits
(deploytool's build lock). Most of a docker test's time is waiting on a health check or a
container start, which is why five workers share two cores well.

The longest units go first (longest-processing-time first), each to whichever worker is idle:
the seconds each unit took in the last run are kept in pytest's cache (.pytest_cache); a run
without them (a fresh clone) starts the docker tests first, the ones that wait most (a file of
them kept together by its built image among them, the larger first), and runs
the users of the sglang environments (parser and referee venvs) last: the controller starts
making those at once in a process of its own, so on a new machine no worker waits on their
build while it has other tests to run. A worker
is given its next unit only when it has nothing left to run (xdist's own default queues one
ahead, which leaves a long unit waiting behind another at the end).

The workers collect, the controller schedules from test ids alone: each worker writes every
test's id and unit to a folder the controller names (xdist's workerinput), and the scheduler
reads them. Without xdist none of this runs and the order is pytest-randomly's (docker tests
first).

At the end, after the skips and their reasons (-ra), the three files that took longest.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest

_PLAN_KEY = "deploytool_test_units"
_CACHE_KEY = "deploytool/unit-seconds"
_TEST_SECONDS: dict[str, float] = defaultdict(float)
_DOCKER = "docker:"  # the unit of a docker test that runs alone: this prefix and its id


def is_docker(item: pytest.Item) -> bool:
    return item.get_closest_marker("docker") is not None


def needs_sglang_environments(item: pytest.Item) -> bool:
    return "sglang_parser_python" in getattr(item, "fixturenames", ())  # directly or through the referee's


def _flags(item: pytest.Item) -> str:
    """What the controller orders by when it has no timings: d, a docker test; s, a user of the
    sglang environments."""
    return ("d" if is_docker(item) else "") + ("s" if needs_sglang_environments(item) else "") or "-"


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    return any(d.scope in ("class", "module", "package") for chain in defs for d in chain)


def unit_of(item: pytest.Item) -> str:
    if is_docker(item) and not _shares_a_module_fixture(item):
        return _DOCKER + item.nodeid
    return _file(item.nodeid)


def order_and_report(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Called after the docker marks are set: docker tests first (a stable sort, so within each
    part the order stays pytest-randomly's); on an xdist worker, every test's unit goes to the
    controller."""
    items.sort(key=lambda item: not is_docker(item))
    folder = getattr(config, "workerinput", {}).get(_PLAN_KEY)
    if folder:
        lines = "\n".join(f"{unit_of(item)}\t{_flags(item)}\t{item.nodeid}" for item in items)
        Path(folder, config.workerinput["workerid"]).write_text(lines)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """Controller side: where this worker writes its tests' units."""
    config = node.config
    if not hasattr(config, "_deploytool_plan_dir"):
        config._deploytool_plan_dir = tempfile.mkdtemp(prefix="deploytool-test-plan-")
        config.add_cleanup(lambda: shutil.rmtree(config._deploytool_plan_dir, ignore_errors=True))
    node.workerinput[_PLAN_KEY] = config._deploytool_plan_dir


def _read_units(config: pytest.Config) -> dict[str, str]:
    """test id -> unit, as the first worker to write them saw (all collect the same tests); the
    units with a docker test in config._deploytool_docker_units, those with a test that needs
    the sglang environments in config._deploytool_sglang_units."""
    if not hasattr(config, "_deploytool_units"):
        paths = sorted(Path(config._deploytool_plan_dir).iterdir())
        rows = [line.split("\t", 2) for line in paths[0].read_text().splitlines() if line] if paths else []
        config._deploytool_units = {nodeid: unit for unit, _, nodeid in rows}
        config._deploytool_docker_units = {unit for unit, flags, _ in rows if "d" in flags}
        config._deploytool_sglang_units = {unit for unit, flags, _ in rows if "s" in flags}
    return config._deploytool_units


def _make_sglang_environments(config: pytest.Config) -> None:
    """Start making the sglang parser and referee environments (conftest's sglang_parser_python
    and sglang_referee_python, in the shared test cache) in a process beside the workers. On a
    new machine that is a minute or two of pip; a worker that needs them meanwhile waits on
    their build lock, as it would wait for another worker's build. Made or failed here, the
    fixtures find the stamps, or try again and say why (so its own output is not kept)."""
    import signal
    import subprocess
    import sys

    from conftest import SGLANG, shared_test_cache

    home = Path(tempfile.mkdtemp(prefix="deploytool-test-sglang-"))
    (home / "cache").symlink_to(shared_test_cache())
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from deploytool.image.referee import referee_python; referee_python(sys.argv[1])",
            SGLANG,
        ],
        env={**os.environ, "DEPLOYTOOL_HOME": str(home)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )

    def stop() -> None:  # the run ends first only when it was cut short: a stamp is written last
        if proc.poll() is None:  # its session: pip's processes too
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)
        shutil.rmtree(home, ignore_errors=True)

    config.add_cleanup(stop)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getvalue("dist") == "each":  # every test on every worker: nothing to split
        return None
    from xdist.scheduler import LoadScopeScheduling

    class LongestUnitsFirst(LoadScopeScheduling):
        """xdist's per-scope scheduling with the units above as scopes, the longest first, and
        no unit queued behind a running one."""

        def _split_scope(self, nodeid: str) -> str:
            return _read_units(config).get(nodeid) or _file(nodeid)

        def schedule(self) -> None:
            """xdist's, with the units in the order below instead of the collection's."""
            if self.collection is not None or not self._check_nodes_have_same_collection():
                return super().schedule()
            self.collection = list(next(iter(self.registered_collections.values())))
            units: dict[str, dict[str, bool]] = defaultdict(dict)
            for nodeid in self.collection:  # within a unit, pytest-randomly's order
                units[self._split_scope(nodeid)][nodeid] = False
            last = config.cache.get(_CACHE_KEY, {}) if getattr(config, "cache", None) is not None else {}
            docker, sglang = config._deploytool_docker_units, config._deploytool_sglang_units
            if sglang:
                _make_sglang_environments(config)

            guess = _guesses(units, last, docker)

            def weight(unit: str) -> tuple[float, bool, bool, int]:
                # the seconds it took last time when known, else a guess from the units that are (a
                # test added or renamed since); without any (a new clone) the units with docker tests
                # first (a file kept together by its built image among them, the larger first: its
                # build is the longest wait of a new machine), then the others, the users of the
                # sglang environments last (made meanwhile, beside the workers)
                seconds = last.get(unit, guess(unit))
                return (-seconds, unit not in docker, unit in sglang, -len(units[unit]))

            for unit in sorted(units, key=weight):
                self.workqueue[unit] = units[unit]
            for node in self.nodes[len(self.workqueue) :]:  # more workers than units
                self.assigned_work.pop(node)
                node.shutdown()
            for node in self.nodes:
                self._reschedule(node)

        def _reschedule(self, node) -> None:
            # A worker holds its last test until it is sent the next (it needs `nextitem`), so
            # one pending test means it is idle: only then give it the next unit.
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            while self.workqueue and self._pending_of(self.assigned_work[node]) <= 1:
                self._assign_work_unit(node)  # a unit of one test leaves it idle still: one more

    return LongestUnitsFirst(config, log)


def _guesses(units: dict[str, dict[str, bool]], last: dict[str, float], docker: set[str]):
    """The seconds a unit with no time of its own is guessed to take: its tests times the mean
    seconds a test took in the units of its kind (with docker tests or not) that have one. Left
    at 0 it would run after every timed unit, and a new docker test of half a minute then starts
    when the others are ending and is the run's tail."""
    per_test: dict[bool, float] = {}
    for kind in (True, False):
        timed = [u for u in units if u in last and (u in docker) == kind]
        tests = sum(len(units[u]) for u in timed)
        per_test[kind] = sum(last[u] for u in timed) / tests if tests else 0.0
    return lambda unit: per_test[unit in docker] * len(units[unit])


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # setup (where a fixture makes its environment), call and teardown, on whichever worker ran it
    _TEST_SECONDS[report.nodeid] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The controller of an xdist run keeps what each unit took, for the next run's order."""
    config = session.config
    if (
        not _TEST_SECONDS
        or getattr(config, "cache", None) is None
        or not hasattr(config, "_deploytool_plan_dir")
    ):
        return
    units = _read_units(config)
    seconds: dict[str, float] = defaultdict(float)
    for nodeid, spent in _TEST_SECONDS.items():
        seconds[units.get(nodeid) or _file(nodeid)] += spent
    config.cache.set(_CACHE_KEY, {**config.cache.get(_CACHE_KEY, {}), **seconds})


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter):
    # around the terminal reporter's own summary, so this comes after its list of skips
    result = yield
    if _TEST_SECONDS and getattr(terminalreporter.config, "workerinput", None) is None:
        per_file: dict[str, float] = defaultdict(float)
        for nodeid, spent in _TEST_SECONDS.items():
            per_file[_file(nodeid)] += spent
        terminalreporter.write_sep("=", "slowest files (setup + call + teardown, summed over their tests)")
        for path, seconds in sorted(per_file.items(), key=lambda kv: -kv[1])[:3]:
            terminalreporter.write_line(f"{seconds:8.1f}s  {path}")
    return result
