"""Runs the selected suites against one endpoint and writes the report after each suite.

Order of events: validate the profile's qualify settings (bad settings refuse to start),
probe the endpoint (unreachable -> nothing runs, exit 2), then each suite in registry order,
each bounded by its budget; a suite's exception becomes an `error` verdict and the next suite
runs. The report is rewritten after every suite, so Ctrl-C or a crash leaves a partial one.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .. import serverfields
from ..client import EndpointClient, wait_until_ready
from .base import ServerInfo, SuiteContext, SuiteResult, SuiteSettings, Verdict
from .config import select_suites, suite_settings
from .suites import registry

if TYPE_CHECKING:
    from ..targets import Target

EXIT_PASSED, EXIT_GATE_FAILED, EXIT_COULD_NOT_RUN = 0, 1, 2


@dataclass
class QualifyReport:
    url: str
    report_dir: Path
    profile: str | None
    slot: str | None = None
    release: int | None = None
    image: str | None = None
    image_labels: dict[str, str] = field(default_factory=dict)
    limit: int | None = None
    suites: list[SuiteResult] = field(default_factory=list)
    server: ServerInfo | None = None
    started_at: str = ""
    finished_at: str | None = None
    incomplete: bool = False  # interrupted, or suites left unrun
    could_not_run: str | None = None  # why qualification could not run at all

    @property
    def passed(self) -> bool:
        """True only when nothing was left unrun and every suite that ran passed."""
        ran = [s for s in self.suites if s.verdict is not Verdict.SKIPPED]
        return (not self.incomplete and self.could_not_run is None and bool(ran)
                and all(s.verdict is Verdict.PASSED for s in ran))

    @property
    def verdict(self) -> str:
        if self.passed:
            return "passed"
        if self.exit_code == EXIT_GATE_FAILED:
            return "failed"
        return "incomplete" if self.incomplete else "error"

    @property
    def exit_code(self) -> int:
        if self.passed:
            return EXIT_PASSED
        if self.could_not_run is not None or self.incomplete:
            return EXIT_COULD_NOT_RUN
        if any(s.verdict is Verdict.FAILED for s in self.suites):
            return EXIT_GATE_FAILED
        return EXIT_COULD_NOT_RUN  # errors only, or nothing ran

    def summary_line(self) -> str:
        counts: dict[str, int] = {}
        for s in self.suites:
            counts[s.verdict.value] = counts.get(s.verdict.value, 0) + 1
        parts = ", ".join(f"{n} {v}" for v, n in counts.items()) or "no suites"
        failed = [s.name for s in self.suites if s.verdict in (Verdict.FAILED, Verdict.ERROR)]
        why = f" ({', '.join(failed)})" if failed else ""
        head = f"qualify {self.verdict.upper()}: {parts}{why}"
        if self.server is not None and self.server.is_simulator:
            head += "; against the reference runtime (a simulator, not a model)"
        if self.server is not None and self.server.weight_version_changed:
            head += (f"; WEIGHTS CHANGED during the run (weight_version {self.server.weight_version} -> "
                     f"{self.server.weight_version_at_end})")
        if self.could_not_run:
            head += f"; could not run: {self.could_not_run}"
        if self.incomplete:
            head += "; INCOMPLETE"
        if self.limit is not None:
            head += f"; --limit {self.limit}"
        return f"{head}; report: {self.report_dir}"

    def suite(self, name: str) -> SuiteResult | None:
        return next((s for s in self.suites if s.name == name), None)


def run_qualification(target: "Target", *, suites: list[str] | None = None, limit: int | None = None,
                      report_dir: Path, overrides: dict[str, dict] | None = None,
                      progress: bool = True) -> QualifyReport:
    """Qualify the endpoint of `target`; writes results.json, report.md and report.html into
    report_dir and returns the report (see QualifyReport.exit_code for 0/1/2).
    Raises UsageError/ProfileError for bad suite names or settings, before anything is sent."""
    from .report import write_reports

    modules = registry()
    profile = target.profile
    names = select_suites(modules, profile, suites)
    settings = suite_settings(modules, profile, overrides)
    if limit is not None and limit < 1:
        from ..errors import UsageError
        raise UsageError(f"--limit {limit}: expected a positive number of items")

    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    release = getattr(target, "release", None)
    report = QualifyReport(
        url=target.url, report_dir=report_dir, profile=profile.name if profile else None,
        slot=getattr(release, "slot", None), release=getattr(release, "release", None),
        image=getattr(release, "image", None), image_labels=dict(getattr(target, "image_labels", None) or {}),
        limit=limit, started_at=_now(),
    )
    write_reports(report)
    console = Console(stderr=True)
    bars = Progress(TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("{task.fields[status]}"),
                    console=console, disable=not progress, transient=False)
    pending = list(names)
    running: str | None = None  # the suite in progress, if any (Ctrl-C names it)
    try:
        with bars:
            report.server = asyncio.run(probe_server(
                target.url, settings["preflight"], profile,
                progress=(lambda line: console.print(line, highlight=False)) if progress else None))
            if not report.server.reachable:
                report.could_not_run = f"endpoint {target.url} is unreachable: {report.server.error}"
            elif not report.server.ready:
                report.could_not_run = (f"the server at {target.url} never became ready: "
                                        f"{report.server.error}")
            while pending:
                name = running = pending[0]
                result = _run_one(modules[name], settings[name], report, target, limit, bars)
                running = None
                report.suites.append(result)
                pending.pop(0)
                write_reports(report)
            if report.server.reachable:
                report.server.weight_version_at_end = asyncio.run(_weight_version(target.url))
    except KeyboardInterrupt:
        report.incomplete = True
        for name in pending:
            if report.suite(name) is None:
                why = ("interrupted while running (Ctrl-C)" if name == running
                       else "not run: qualification was interrupted (Ctrl-C)")
                report.suites.append(SuiteResult.errored(name, why))
    finally:
        report.finished_at = _now()
        if pending and not report.incomplete:  # an unexpected exception: still leave a report
            report.incomplete = True
        write_reports(report)
    return report


def _run_one(module: Any, settings: SuiteSettings, report: QualifyReport, target: "Target",
             limit: int | None, bars: Progress) -> SuiteResult:
    name = module.name
    server = report.server
    assert server is not None
    if not server.reachable:
        return SuiteResult.errored(name, "not run: the endpoint is unreachable")
    if not server.ready and name != "preflight":
        return SuiteResult.errored(name, "not run: the server never became ready")
    skip = module.applies_to(target.profile, server)
    if skip:
        return SuiteResult.skipped(name, skip)
    task = bars.add_task(name, total=None, status="")

    def on_progress(advance: int | None, total: int | None) -> None:
        if total is not None:
            bars.update(task, total=total)
        if advance:
            bars.advance(task, advance)

    started = time.monotonic()
    try:
        result = asyncio.run(_run_bounded(module, settings, report, target, limit, on_progress))
    except KeyboardInterrupt:
        bars.update(task, status="interrupted")
        raise
    except Exception as exc:  # a bug or an unexpected answer: this suite errors, the rest run
        result = SuiteResult.errored(name, f"suite crashed: {type(exc).__name__}: {exc}")
    result.name = name
    result.duration_s = round(time.monotonic() - started, 3)
    result.settings = settings.model_dump(mode="json")
    bars.update(task, status=result.verdict.value, total=bars.tasks[task].total or 1,
                completed=bars.tasks[task].total or 1)
    return result


async def _run_bounded(module: Any, settings: SuiteSettings, report: QualifyReport, target: "Target",
                       limit: int | None, on_progress: Any) -> SuiteResult:
    async with EndpointClient(target.url, timeout=settings.request_timeout_s) as client:
        ctx = SuiteContext(client=client, settings=settings, server=report.server, profile=target.profile,
                           target=target, limit=limit,
                           previous_results=getattr(target, "previous_results", None),
                           progress=on_progress)
        outcome = module.run(ctx)
        if not inspect.isawaitable(outcome):
            return outcome
        try:
            return await asyncio.wait_for(outcome, settings.budget_s)
        except asyncio.TimeoutError:
            return SuiteResult.errored(module.name, f"suite ran past its budget of {settings.budget_s:g} s "
                                                    f"(qualify.{module.name}.budget_s)")


async def probe_server(url: str, preflight: Any, profile: Any, progress: Any = None) -> ServerInfo:
    """Is the endpoint there and ready? Then read /v1/models, server info and model info.
    Waits up to preflight.ready_timeout_s (20 min by default) for a server that is still loading:
    SGLang refuses connections until its weights are loaded, then answers 503 while it warms up."""
    info = ServerInfo(url=url)
    health_path = profile.health.path if profile is not None else "/health"
    ready = await wait_until_ready(url, health_path=health_path, timeout_s=preflight.ready_timeout_s,
                                   probe_timeout_s=preflight.probe_timeout_s, progress=progress)
    info.reachable, info.ready, info.health_status = ready.reachable, ready.ready, ready.status
    info.waited_s = ready.waited_s
    if not ready.ready:
        info.error = f"{ready.error} after {ready.waited_s:g} s (qualify.preflight.ready_timeout_s)"
    if not info.reachable:
        return info
    async with httpx.AsyncClient(base_url=url, timeout=preflight.probe_timeout_s) as http:
        info.models = await _optional_json(http, "/v1/models")
        for path in serverfields.SERVER_INFO_PATHS:  # 0.5.23's name first; /get_server_info for older servers
            info.server_info = await _optional_json(http, path)
            if info.server_info is not None:
                info.server_info_path = path
                break
        for path in serverfields.MODEL_INFO_PATHS:  # /get_model_info is deprecated in 0.5.23
            info.model_info = await _optional_json(http, path)
            if info.model_info is not None:
                info.model_info_path = path
                break
    info.weight_version = serverfields.weight_version(info.model_info)
    return info


async def _weight_version(url: str) -> str | None:
    """The weight_version at the end of the run (a change during qualification is reported)."""
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        for path in serverfields.MODEL_INFO_PATHS:
            body = await _optional_json(http, path)
            if body is not None:
                return serverfields.weight_version(body)
    return None


async def _optional_json(http: httpx.AsyncClient, path: str) -> Any:
    try:
        response = await http.get(path)
        if response.status_code != 200:
            return None
        return response.json()
    except (httpx.HTTPError, ValueError):
        return None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
