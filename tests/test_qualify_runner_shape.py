"""How a qualification runs, against the reference runtime: one event loop and one client of the
endpoint for the whole run, what a person sees handed in (the runner draws nothing itself), and
suites held to the Suite protocol of qualify/suite_api.py."""

from __future__ import annotations

import asyncio
import sys
import types
from pathlib import Path

import pytest
from qualify_helpers import qualify, sim, sim_profile

from deploytool.qualify import resilience, runner
from deploytool.qualify import suites as suites_package
from deploytool.qualify.suite_api import Suite, SuiteSettings
from deploytool.qualify.suites import registry
from deploytool.server.client import EndpointClient

SUITES = ["preflight", "contract", "tools"]


@pytest.fixture(scope="module")
def server():
    handle = sim()
    yield handle
    handle.stop()


class Recorder:
    """A QualifyReporter that keeps what it was told."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def waiting(self, line: str) -> None:
        self.events.append(("waiting", line))

    def suite_started(self, name: str) -> None:
        self.events.append(("started", name))

    def suite_progress(self, name: str, advance: int | None, total: int | None) -> None:
        self.events.append(("progress", name))

    def suite_ended(self, name: str, status: str) -> None:
        self.events.append(("ended", name, status))

    def __enter__(self) -> Recorder:
        self.events.append(("enter",))
        return self

    def __exit__(self, *exc: object) -> None:
        self.events.append(("exit",))


def test_a_run_is_one_event_loop_and_one_client(server, tmp_path: Path, monkeypatch) -> None:
    clients: list[EndpointClient] = []
    loops: list[asyncio.AbstractEventLoop] = []

    class Counted(EndpointClient):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            clients.append(self)

    new_loop = asyncio.events.new_event_loop

    def counted_loop() -> asyncio.AbstractEventLoop:
        loops.append(new_loop())
        return loops[-1]

    for module in (runner, resilience):
        monkeypatch.setattr(module, "EndpointClient", Counted)
    monkeypatch.setattr(asyncio.events, "new_event_loop", counted_loop)
    report = qualify(server.url, tmp_path, profile=sim_profile(server.settings.port), suites=SUITES)
    assert report.passed, report.summary_line()
    assert report.server.weight_version_at_end is not None  # read at the end, on the same client
    assert (len(loops), len(clients)) == (1, 1)


def test_what_a_person_sees_is_handed_in(server, tmp_path: Path, capfd) -> None:
    recorder = Recorder()
    report = runner.run_qualification(
        runner_target(server),
        suites=SUITES,
        report_dir=tmp_path / "r",
        reporter=recorder,
        overrides={"preflight": {"ready_timeout_s": 2}},
        limit=5,
    )
    assert report.passed, report.summary_line()
    events = recorder.events
    assert events[0] == ("enter",) and events[-1] == ("exit",)
    assert [e[1] for e in events if e[0] == "started"] == SUITES
    assert [e[1:] for e in events if e[0] == "ended"] == [(s.name, s.verdict.value) for s in report.suites]
    assert any(e[0] == "progress" for e in events)
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")  # the runner draws nothing of its own


def runner_target(server):
    from deploytool.checks.targets import Target

    return Target(url=server.url, profile=sim_profile(server.settings.port))


def test_every_suite_satisfies_the_suite_protocol_and_one_that_does_not_is_refused(monkeypatch) -> None:
    modules = registry()
    assert modules and all(isinstance(module, Suite) for module in modules.values())
    broken = types.ModuleType("deploytool.qualify.suites.broken")
    broken.name, broken.Settings = "broken", SuiteSettings
    broken.run = lambda ctx: None  # no applies_to
    monkeypatch.setitem(sys.modules, broken.__name__, broken)
    monkeypatch.setattr(suites_package, "SUITE_MODULES", [*suites_package.SUITE_MODULES, "broken"])
    with pytest.raises(TypeError, match="qualify suite broken does not have the interface"):
        registry()
