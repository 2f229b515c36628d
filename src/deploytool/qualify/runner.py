"""Runs the selected suites against one endpoint and writes the report after each suite.

Order of events: validate the profile's qualify settings (bad settings refuse to start),
probe the endpoint (unreachable -> nothing runs: could not run, exit 6), then each suite in registry order,
each bounded by its budget; a suite's exception becomes an `error` verdict and the next suite
runs. The report is rewritten after every suite, so Ctrl-C or a crash leaves a partial one.

A run is one event loop and one client of the endpoint: the probe, every suite (each through its
own GuardedClient, with its own settings and breaker turn) and the closing weight-version read
share its connections. What a person sees is handed in (a QualifyReporter, as deploy's Reporter
is): the runner draws nothing itself.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..server.client import EndpointClient
from ..server.facts import ServerFacts, read_server_facts, read_weight_version
from ..server.readiness import wait_until_ready
from .config import select_suites, suite_settings
from .context import SuiteContext
from .report import Against, write_reports
from .resilience import MAX_FAILED_PROBES, Breaker, GuardedClient, health_probe
from .results import EXIT_COULD_NOT_RUN, EXIT_GATE_FAILED, EXIT_PASSED, QualifyReport  # noqa: F401
from .suite_api import Suite, SuiteResult, SuiteSettings, Verdict
from .suites import registry
from .suites.preflight import Settings as PreflightSettings

if TYPE_CHECKING:
    from ..checks.targets import Target
    from ..profiles import Profile

# What sets how long qualify waits for a loading server, as the waiting line and the error name it.
READY_TIMEOUT_NAME = "--ready-timeout, or qualify.preflight.ready_timeout_s"


class QualifyReporter(Protocol):
    """How a qualification tells a person what it is doing, used as a context manager around
    the run; the CLI's draws one bar a suite on stderr. Without one a run is silent (deploy's
    executor, tune, library callers)."""

    def waiting(self, line: str) -> None: ...  # the probe waits for a server that is still loading

    def suite_started(self, name: str) -> None: ...

    def suite_progress(self, name: str, advance: int | None, total: int | None) -> None: ...

    def suite_ended(self, name: str, status: str) -> None: ...  # its verdict, or "interrupted"

    def __enter__(self) -> object: ...

    def __exit__(self, *exc: object) -> None: ...


class Silent:
    """The QualifyReporter that shows nothing."""

    def waiting(self, line: str) -> None:
        pass

    def suite_started(self, name: str) -> None:
        pass

    def suite_progress(self, name: str, advance: int | None, total: int | None) -> None:
        pass

    def suite_ended(self, name: str, status: str) -> None:
        pass

    def __enter__(self) -> Silent:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


@dataclass
class _Qualification:
    """What every suite's turn of one qualification needs, carried as one."""

    target: Target
    report: QualifyReport
    limit: int | None
    reporter: QualifyReporter
    probe_timeout_s: float = 10.0
    breaker: Breaker = field(default_factory=Breaker)
    pending: list[str] = field(default_factory=list)  # the suites not finished yet, in run order
    running: str | None = None  # the suite in progress, if any (Ctrl-C names it)


def run_qualification(
    target: Target,
    *,
    suites: list[str] | None = None,
    limit: int | None = None,
    report_dir: Path,
    overrides: dict[str, dict[str, Any]] | None = None,
    reporter: QualifyReporter | None = None,
) -> QualifyReport:
    """Qualify the endpoint of `target`; writes results.json, report.md and report.html into
    report_dir and returns the report (see QualifyReport.exit_code for 0/1/6).
    Raises UsageError/ProfileError for bad suite names or settings, before anything is sent."""
    modules = registry()
    profile = target.profile
    names = select_suites(modules, profile, suites)
    settings = suite_settings(modules, profile, overrides)
    if limit is not None and limit < 1:
        from ..errors import FieldError

        raise FieldError("limit", "expected a positive number of items", value=str(limit))

    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    release = target.release
    report = QualifyReport(
        url=target.url,
        report_dir=report_dir,
        profile=profile.name if profile else None,
        slot=release.slot if release else None,
        release=release.release if release else None,
        image=release.image if release else None,
        image_labels=dict(target.image_labels or {}),
        limit=limit,
        started_at=_now(),
        model=target.model,
        baseline=target.baseline,
    )
    against = baseline_of(target)
    write_reports(report, against)
    run = _Qualification(
        target=target,
        report=report,
        limit=limit,
        reporter=reporter or Silent(),
        probe_timeout_s=_preflight(settings).probe_timeout_s,
        pending=list(names),
    )
    try:
        with run.reporter:
            asyncio.run(_qualify(run, modules, settings, lambda: write_reports(report, against)))
    except KeyboardInterrupt:
        _interrupted(report, run.pending, run.running)
    finally:
        report.finished_at = _now()
        if run.pending and not report.incomplete:  # an unexpected exception: still leave a report
            report.incomplete = True
        write_reports(report, against)
    return report


async def _qualify(
    run: _Qualification,
    modules: dict[str, Suite],
    settings: dict[str, SuiteSettings],
    written: Callable[[], None],
) -> None:
    """The probe, each suite in turn (the report written after each), the closing weight version."""
    target, report, preflight = run.target, run.report, _preflight(settings)
    async with EndpointClient(target.url, timeout=run.probe_timeout_s, api_key=target.api_key) as client:
        report.server = await probe_server(
            client, target.url, preflight, target.profile, progress=run.reporter.waiting
        )
        report.could_not_run = _why_not_run(report.server, target.url)
        while run.pending:
            name = run.running = run.pending[0]
            result = await _run_one(run, client, modules[name], settings[name])
            run.running = None
            report.suites.append(result)
            run.pending.pop(0)
            written()
            _cancelled_meanwhile()
        if report.server.reachable:
            report.server.weight_version_at_end = await read_weight_version(
                client, timeout=run.probe_timeout_s
            )
    _nothing_measured(report)


def _preflight(settings: dict[str, SuiteSettings]) -> PreflightSettings:
    """The preflight suite's settings, which hold the probe's timeouts."""
    preflight = settings["preflight"]
    if not isinstance(preflight, PreflightSettings):  # the registry pairs each suite with its own model
        raise TypeError(
            f"qualify.preflight: settings are {type(preflight).__name__}, not the preflight suite's"
        )
    return preflight


def _cancelled_meanwhile() -> None:
    """Ctrl-C cancels the run's task; a suite that swallowed the cancellation (wait_for on
    Python 3.11 can, as a request finishes) must not leave the next suite to start."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def _interrupted(report: QualifyReport, pending: list[str], running: str | None) -> None:
    """Ctrl-C: the suite that was running and those not reached are errors saying so."""
    report.incomplete = report.interrupted = True
    for name in pending:
        if report.suite(name) is None:
            why = (
                "interrupted while running (Ctrl-C)"
                if name == running
                else "not run: qualification was interrupted (Ctrl-C)"
            )
            report.suites.append(SuiteResult.errored(name, why))


def _why_not_run(server: ServerFacts, url: str) -> str | None:
    """Why no suite can run against what the probe found, or None."""
    if not server.reachable:
        return f"endpoint {url} is unreachable: {server.error}"
    if server.unauthorized:  # a keyed server refused the key (or its absence)
        return (
            f"the server at {url} answered 401 Unauthorized: it requires an "
            "API key (--api-key-file PATH or DEPLOYTOOL_API_KEY; a slot's release "
            "reads its own from where its profile's server.api_key says)"
        )
    if not server.ready:
        return f"the server at {url} never became ready: {server.error}"
    return None


def baseline_of(target: Target) -> Against:
    """What the report's top compares with: the baseline release's stored results (the rule of
    checks/targets.py) and both releases' records. An unreadable baseline is said, not fatal."""
    from ..release.inputs import read_record
    from .cutover import read_results

    release, previous, path = target.release, target.previous, target.previous_results
    doc, why = read_results(path) if path is not None else (None, None)
    name = target.baseline
    if why:
        name = f"{name or path}: unreadable ({why})"
    slot = release.slot if release else None
    notes = []
    if (
        doc is None and path is None and slot and previous is not None
    ):  # a baseline release that has no results
        from ..checks.targets import unqualified

        notes.append(unqualified(slot, previous.release))
    return Against(
        doc=doc,
        name=name if doc is not None else None,
        notes=notes,
        record=read_record(slot, release.release) if slot and release else {},
        baseline_record=read_record(slot, previous.release) if slot and previous else {},
        bench=kept_bench(slot, release.release if release else None),
        baseline_bench=kept_bench(slot, previous.release if previous else None),
    )


def kept_bench(slot: str | None, release: int | None) -> dict[str, Any] | None:
    """A release's newest kept bench run (the top's speeds when a qualification ran no performance suite)."""
    from ..checks.reports import newest_kept
    from .cutover import read_results

    path = newest_kept(slot, release, "bench") if slot and release is not None else None
    return read_results(path, "bench")[0] if path is not None else None


async def _run_one(
    run: _Qualification, client: EndpointClient, module: Suite, settings: SuiteSettings
) -> SuiteResult:
    name, target, breaker, reporter = module.name, run.target, run.breaker, run.reporter
    server = run.report.server
    assert server is not None
    if not server.reachable:
        return SuiteResult.errored(name, "not run: the endpoint is unreachable")
    if not server.ready and name != "preflight":
        return SuiteResult.errored(name, "not run: the server never became ready")
    if server.unauthorized:  # every call would be refused
        return SuiteResult.errored(name, "not run: the server requires an API key (401 Unauthorized)")
    skip = module.applies_to(target.profile, server)
    if skip:
        return SuiteResult.skipped(name, skip)
    if name != "preflight" and breaker.suspect:
        if breaker.failed_probes >= MAX_FAILED_PROBES:
            return SuiteResult.errored(
                name,
                f"not run: the server failed {breaker.failed_probes} health probes in "
                f"a row ({breaker.log[-1]})",
            )
        why = await health_probe(client, server.served_model_name, run.probe_timeout_s)
        if why:
            breaker.failed_probes += 1
            breaker.log.append(why)
            return SuiteResult.errored(name, f"not run: {why}")
        breaker.healthy()
    breaker.start_suite(settings.max_consecutive_failures)
    reporter.suite_started(name)
    started = time.monotonic()
    try:
        result = await _run_bounded(
            run,
            client,
            module,
            settings,
            lambda advance, total: reporter.suite_progress(name, advance, total),
        )
    except (asyncio.CancelledError, KeyboardInterrupt):  # Ctrl-C cancels the run's task
        reporter.suite_ended(name, "interrupted")
        raise
    except Exception as exc:  # a bug or an unexpected answer: this suite errors, the rest run
        result = SuiteResult.errored(name, f"suite crashed: {type(exc).__name__}: {exc}")
    if breaker.not_sent:
        note = f"{breaker.not_sent} request(s) not sent: {breaker.tripped}"
        result.figures["not_sent"] = {"requests": breaker.not_sent, "why": breaker.tripped}
        result.reason = f"{result.reason}; {note}" if result.reason else note
    if name == "preflight" and any(not g.passed and g.name.endswith(" status") for g in result.gates):
        breaker.suspect = True  # /health_generate failed: the next suite probes before it sends anything
    result.name = name
    result.duration_s = round(time.monotonic() - started, 3)
    result.settings = settings.model_dump(mode="json")
    reporter.suite_ended(name, result.verdict.value)
    return result


async def _run_bounded(
    run: _Qualification,
    client: EndpointClient,
    module: Suite,
    settings: SuiteSettings,
    on_progress: Callable[[int | None, int | None], None],
) -> SuiteResult:
    target, report = run.target, run.report
    assert report.server is not None
    guarded = GuardedClient(client, run.breaker, settings)  # the suite's view: its timeouts, its breaker turn
    ctx = SuiteContext(
        client=guarded,
        settings=settings,
        server=report.server,
        profile=target.profile,
        target=target,
        limit=run.limit,
        previous_results=target.previous_results,
        progress=on_progress,
    )
    outcome = module.run(ctx)
    if not inspect.isawaitable(outcome):
        return outcome
    try:
        # in the run's own task (asyncio.timeout, not wait_for's task of its own): a Ctrl-C or a
        # KeyboardInterrupt the suite raises unwinds the run once, closing its client
        async with asyncio.timeout(settings.budget_s):
            return await outcome
    except TimeoutError:
        return SuiteResult.errored(
            module.name,
            f"suite ran past its budget of {settings.budget_s:g} s (qualify.{module.name}.budget_s)",
        )


def _nothing_measured(report: QualifyReport) -> None:
    """Could not run (exit 6), not a failed gate, when the server stopped answering before any
    suite past preflight ran."""
    if report.could_not_run is not None:
        return
    others = [s for s in report.suites if s.name != "preflight" and s.verdict is not Verdict.SKIPPED]
    if others and all(s.verdict is Verdict.ERROR and s.reason.startswith("not run") for s in others):
        report.could_not_run = f"the server stopped answering: {others[0].reason.removeprefix('not run: ')}"


async def probe_server(
    client: EndpointClient,
    url: str,
    preflight: PreflightSettings,
    profile: Profile | None,
    progress: Callable[[str], None] | None = None,
) -> ServerFacts:
    """Is the endpoint there and ready? Then read /v1/models, server info and model info.
    Waits up to preflight.ready_timeout_s (20 min by default; `qualify --ready-timeout`) for a server
    that is still loading:
    SGLang refuses connections until its weights are loaded, then answers 503 while it warms up.
    Every call is bounded connect to last byte (the ready-wait by ready_timeout_s, each read by
    probe_timeout_s), so a server that trickles its answers ends the probe, never holds it."""
    info = ServerFacts(url=url)
    health_path = profile.health.path if profile is not None else "/health"
    ready = await wait_until_ready(
        client,
        health_path=health_path,
        timeout_s=preflight.ready_timeout_s,
        probe_timeout_s=preflight.probe_timeout_s,
        progress=progress,
        timeout_name=READY_TIMEOUT_NAME,
    )
    info.reachable, info.ready, info.health_status = ready.reachable, ready.ready, ready.status
    info.waited_s = ready.waited_s
    if not ready.ready:
        info.error = f"{ready.error} after {ready.waited_s:g} s ({READY_TIMEOUT_NAME})"
    if not info.reachable:
        return info
    # SGLang's /server_info carries api_key and a launch_command holding it: read_server_facts
    # redacts them, so reports keep neither
    return await read_server_facts(client, preflight.probe_timeout_s, metrics=False, facts=info)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
