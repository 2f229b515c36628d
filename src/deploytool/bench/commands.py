"""`bench` and `compare` put together from their requests: the target found, the method built,
the runs measured and their reports written. The CLI builds the request, calls one of these
and prints what it returns; `say` gets the line a person watching is told before the work."""

from __future__ import annotations

from collections.abc import Callable

from ..checks.targets import Target, TargetRequest, resolve_target
from ..files import write_atomic, write_json
from .compare import Comparison
from .outcome import BenchOutcome, bench_when_ready
from .request import BenchRequest, CompareInterleaved, CompareRequest, CompareRuns, CompareSlots
from .slot_compare import SlotComparison

Say = Callable[[str], None]


def bench(
    request: BenchRequest,
    *,
    say: Say | None = None,
    on_wait: Say | None = None,
    timeout_name: str | None = None,
    progress: bool = True,
) -> BenchOutcome:
    """Wait for the endpoint, measure it with the request's method, keep the report.
    `timeout_name`: what the waiting's refusal calls the ready timeout (the CLI's flag)."""
    target = resolve_target(request.target)
    method = request.method(target.profile)
    if say:
        say(
            f"bench {target.describe()}: {method.workload} workload, {method.preset} method "
            f"{method.fingerprint()}, {method.repeats} passes"
        )
    return bench_when_ready(
        target,
        method=method,
        report_dir=request.report_dir,
        ready_timeout_s=request.ready_timeout_s,
        timeout_name=timeout_name,
        progress=progress,
        on_wait=on_wait,
    )


def compare(request: CompareRequest, *, say: Say | None = None) -> Comparison | SlotComparison:
    """Runs side by side, two endpoints interleaved, or the same release on two slots; each
    writes its reports to the request's folder when it names one."""
    if isinstance(request, CompareSlots):
        return _compare_slots(request, say)
    if isinstance(request, CompareInterleaved):
        return _compare_interleaved(request, say)
    return _compare_runs(request)


def _compare_runs(request: CompareRuns) -> Comparison:
    from .compare import compare_runs
    from .report import write_comparison_report

    comparison = compare_runs(list(request.runs), allow_mixed_methods=request.allow_mixed_methods)
    if request.report_dir:
        write_comparison_report(comparison, request.report_dir)
    return comparison


def _compare_interleaved(request: CompareInterleaved, say: Say | None) -> Comparison:
    from .interleave import run_interleaved
    from .report import write_comparison_report, write_run_report

    method = request.method()
    url_a, url_b = request.urls
    if say:
        say(f"interleaving {url_a} and {url_b}: {method.workload} workload, {method.repeats} passes each")
    run_a, run_b, comparison = run_interleaved(
        Target(url=url_a, profile=None), Target(url=url_b, profile=None), method
    )
    if request.report_dir:
        write_run_report(run_a, request.report_dir / "A")
        write_run_report(run_b, request.report_dir / "B")
        write_comparison_report(comparison, request.report_dir)
    return comparison


def _compare_slots(request: CompareSlots, say: Say | None) -> SlotComparison:
    from .report import write_run_report
    from .slot_compare import compare_slots

    targets = [
        resolve_target(TargetRequest(slot=s, profiles_dirs=request.profiles_dirs)) for s in request.slots
    ]
    a, b = request.slots
    if say:
        say(f"comparing slots {a.name} and {b.name}: thinking off, then on, passes interleaved")
    comparison, measured = compare_slots(targets, quick=request.quick, repeats=request.repeats)
    report = request.report_dir
    if report:
        for run, where in zip(
            measured, ("thinking-off/A", "thinking-off/B", "thinking-on/A", "thinking-on/B"), strict=True
        ):
            write_run_report(run, report / where)
        write_json(report / "slots.json", comparison)
        write_atomic(report / "slots.md", "\n".join(comparison.lines()) + "\n")
    return comparison
