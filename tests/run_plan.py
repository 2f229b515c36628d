"""How the suite is spread over workers and what it says at its end (hooks, imported by conftest).

Under pytest-xdist (`make test` runs `-n 2`), the docker tests form one unit of work, run one
after another on one worker: they share one engine, one instance name (so one set of slot,
container and volume names), the images they build, and the machine's two cores with the
containers they start. Every other test goes with the rest of its file, so a module-scoped
fixture (a sim server, a built image) is made once, on the worker that runs that file. The
docker unit is queued first, being the longest; the other worker drains the files meanwhile.

The workers collect, the controller schedules from test ids alone: each worker writes the ids
of its docker tests to a folder the controller names (xdist's workerinput), and the scheduler
reads them when it splits the collection into units. Without xdist none of this runs and the
order is pytest-randomly's.

At the end, after the skips and their reasons (-ra), the three files that took longest.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import defaultdict
from functools import cached_property
from pathlib import Path

import pytest

DOCKER_UNIT = "docker tests"
_PLAN_KEY = "deploytool_docker_test_ids"
_FILE_SECONDS: dict[str, float] = defaultdict(float)


def is_docker(item: pytest.Item) -> bool:
    return item.get_closest_marker("docker") is not None


def order_and_report(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Called after the docker marks are set: docker tests first (a stable sort, so within each
    part the order stays pytest-randomly's); on an xdist worker, their ids go to the controller."""
    items.sort(key=lambda item: not is_docker(item))
    folder = getattr(config, "workerinput", {}).get(_PLAN_KEY)
    if folder:
        ids = "\n".join(item.nodeid for item in items if is_docker(item))
        Path(folder, config.workerinput["workerid"]).write_text(ids)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """Controller side: where this worker writes its docker test ids."""
    config = node.config
    if not hasattr(config, "_deploytool_plan_dir"):
        config._deploytool_plan_dir = tempfile.mkdtemp(prefix="deploytool-test-plan-")
        config.add_cleanup(lambda: shutil.rmtree(config._deploytool_plan_dir, ignore_errors=True))
    node.workerinput[_PLAN_KEY] = config._deploytool_plan_dir


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getvalue("dist") == "each":  # every test on every worker: nothing to split
        return None
    from xdist.scheduler import LoadScopeScheduling

    class DockerTestsApart(LoadScopeScheduling):
        """xdist's per-scope scheduling, with all docker tests as one scope and the files' own
        order kept (docker first) instead of the largest scope first."""

        def __init__(self, config: pytest.Config, log=None) -> None:
            super().__init__(config, log)
            config.option.loadscopereorder = False

        @cached_property
        def docker_ids(self) -> set[str]:
            folder = Path(config._deploytool_plan_dir)
            return {line for path in folder.iterdir() for line in path.read_text().splitlines()}

        def _split_scope(self, nodeid: str) -> str:
            return DOCKER_UNIT if nodeid in self.docker_ids else nodeid.split("::", 1)[0]

    return DockerTestsApart(config, log)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # setup (where a fixture makes its environment), call and teardown, on whichever worker ran it
    _FILE_SECONDS[report.nodeid.split("::")[0]] += report.duration


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter):
    # around the terminal reporter's own summary, so this comes after its list of skips
    result = yield
    if _FILE_SECONDS and getattr(terminalreporter.config, "workerinput", None) is None:
        terminalreporter.write_sep("=", "slowest files (setup + call + teardown, summed over their tests)")
        for path, seconds in sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1])[:3]:
            terminalreporter.write_line(f"{seconds:8.1f}s  {path}")
    return result
