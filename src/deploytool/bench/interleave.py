"""A/B in one session: `compare --interleave URL_A URL_B` runs the method's passes against two
endpoints alternately (A B, then B A, ...), so slow drift of the host (another job starting,
thermal throttling, a noisy neighbour) hits both runs alike. The source's advice: trust A/B
tests over profiles.
"""

from __future__ import annotations

import asyncio

from ..checks.targets import Target
from .compare import Comparison, compare_loaded
from .method import BenchMethod
from .results import BenchRun
from .runner import BenchRunner


async def run_interleaved_async(
    target_a: Target, target_b: Target, method: BenchMethod
) -> tuple[BenchRun, BenchRun]:
    a = BenchRunner(target_a, method, progress=False)
    b = BenchRunner(target_b, method, progress=False)
    async with a.session(), b.session():
        for r in range(method.repeats):
            first, second = (a, b) if r % 2 == 0 else (b, a)  # ABBA: neither side always goes first
            await first.run_pass(r)
            await second.run_pass(r)
    run_a, run_b = a.result(), b.result()
    for run, other in ((run_a, "B"), (run_b, "A")):
        run.notes.append(f"interleaved with run {other}: passes alternated A B, B A, ... in one session")
    return run_a, run_b


def run_interleaved(
    target_a: Target, target_b: Target, method: BenchMethod
) -> tuple[BenchRun, BenchRun, Comparison]:
    run_a, run_b = asyncio.run(run_interleaved_async(target_a, target_b, method))
    run_a.source, run_b.source = f"A: {target_a.url}", f"B: {target_b.url}"
    return run_a, run_b, compare_loaded([run_a, run_b])
