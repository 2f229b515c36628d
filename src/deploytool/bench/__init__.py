"""deploytool bench and compare: performance measured with a fixed, recorded method (docs/bench.md).

run = run_bench(target, method=build_method(quick=True), report_dir=Path("reports/bench"))
comparison = compare_runs([Path("reports/a"), Path("reports/b")])
"""

from __future__ import annotations

from pathlib import Path

from ..checks.targets import Target
from .compare import Comparison, ComparisonRow, compare_loaded, compare_runs
from .headline import kept_baseline
from .method import BenchMethod
from .presets import build_method
from .report import write_comparison_report, write_run_report
from .results import BenchRun, Figure, GroupSummary, RequestRecord, load_run, run_from_json
from .roofline import attach_roofline
from .runner import BenchRunner, run_bench_sync

__all__ = [
    "BenchMethod",
    "BenchRun",
    "BenchRunner",
    "Comparison",
    "ComparisonRow",
    "Figure",
    "GroupSummary",
    "RequestRecord",
    "build_method",
    "compare_loaded",
    "compare_runs",
    "load_run",
    "run_bench",
    "run_bench_async",
    "run_from_json",
    "write_comparison_report",
    "write_run_report",
]


def run_bench(
    target: Target, *, method: BenchMethod, report_dir: Path | None, progress: bool = True
) -> BenchRun:
    """Run the method against the target; write results.json, report.md and report.html to
    report_dir when given. Server faults are counted in the run, never raised."""
    run = run_bench_sync(target, method, progress=progress)
    attach_roofline(run, target)
    if report_dir is not None:
        write_run_report(run, Path(report_dir), kept_baseline(target))
    return run


async def run_bench_async(
    target: Target, *, method: BenchMethod, report_dir: Path | None, progress: bool = False
) -> BenchRun:
    """The same, for callers already inside an event loop (a qualify suite)."""
    run = await BenchRunner(target, method, progress=progress).run()
    attach_roofline(run, target)
    if report_dir is not None:
        write_run_report(run, Path(report_dir), kept_baseline(target))
    return run
