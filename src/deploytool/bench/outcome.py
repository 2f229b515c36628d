"""One bench of a target from its start to the exit code it earns: wait until the server is
ready (a server still loading is waited for, not measured), measure with the method, keep the
report, and say whether anything was measured. The CLI prints what this returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..checks.reports import default_report_dir
from ..checks.targets import Target
from ..errors import EXIT_COULD_NOT_RUN, EXIT_FAILED, EXIT_OK
from ..release.secrets import auth_headers
from ..server.client import run_sync
from ..server.readiness import ready_timeout_for, wait_until_ready
from .method import BenchMethod
from .results import BenchRun

EXIT_MEASURED, EXIT_PARTIAL, EXIT_NOTHING_MEASURED = EXIT_OK, EXIT_FAILED, EXIT_COULD_NOT_RUN


@dataclass
class BenchOutcome:
    run: BenchRun | None  # None: the server never became ready, nothing was sent
    exit_code: int
    why: str  # what keeps the exit code from 0; empty when it is 0
    report_dir: Path | None = None


def bench_exit_code(run: BenchRun) -> tuple[int, str]:
    """0: every request completed and the run is complete; 1: the run is incomplete (its time
    bound cut it) or some request failed; 6: no measured request completed (endpoint unusable)."""
    completed = sum(1 for r in run.requests if r.phase != "warmup" and r.ok)
    if completed == 0:
        return EXIT_NOTHING_MEASURED, "no request completed: nothing was measured (endpoint unusable)"
    problems = []
    if run.errors_total:
        problems.append(f"{run.errors_total} of {run.requests_total} requests failed")
    if not run.complete:
        problems.append("the run is incomplete (its time bound cut it)")
    return (EXIT_PARTIAL, "; ".join(problems)) if problems else (EXIT_MEASURED, "")


def bench_when_ready(
    target: Target,
    *,
    method: BenchMethod,
    report_dir: Path | None,
    ready_timeout_s: float | None = None,
    timeout_name: str | None = None,
    on_wait: Callable[[str], None] | None = None,
    progress: bool = True,
) -> BenchOutcome:
    """Wait for the target (`ready_timeout_s`, else its profile's preflight setting), then run
    the method and write the report (`report_dir`, else a fresh folder under the state folder,
    with the slot's release when there is one). `on_wait` gets a line now and then while waiting."""
    from . import run_bench

    profile = target.profile
    wait = ready_timeout_s if ready_timeout_s is not None else ready_timeout_for(profile)
    ready = run_sync(
        wait_until_ready(
            target.url,
            health_path=profile.health.path if profile else "/health",
            timeout_s=wait,
            headers=auth_headers(target.api_key),
            progress=on_wait,
            timeout_name=timeout_name,
        )
    )
    if not ready.ready:
        named = f" ({timeout_name})" if timeout_name else ""
        return BenchOutcome(
            None,
            EXIT_NOTHING_MEASURED,
            f"{target.url} did not become ready within {wait:g} s{named}: {ready.error}",
        )
    report_dir = report_dir or default_report_dir(
        "bench",
        slot=target.release.slot if target.release else None,
        release=target.release.release if target.release else None,
    )
    run = run_bench(target, method=method, report_dir=report_dir, progress=progress)
    code, why = bench_exit_code(run)
    return BenchOutcome(run, code, why, report_dir)
