"""bench against the reference runtime, whose speeds are settings: the method must recover them.

Real HTTP on loopback; small outputs and fast sim settings keep the whole file to seconds on 2 cores.
No figure is held to the wall clock: a speed never beats the sim's setting, and figures of one
run are compared as ratios, narrow enough that a wrong formula fails (e.g. counting the first
token in decode speed, or mixing warm-up into the medians).
"""

from __future__ import annotations

import json
import time

import pytest
from bench_helpers import (
    AGGREGATE_TPS,
    DECODE_TPS,
    MAX_RUNNING,
    PREFILL_TPS,
    sim_in_process,
    sim_in_thread,
    tiny_method,
)

from deploytool.bench import BenchRunner, compare_runs, run_bench
from deploytool.bench.prompts import Prompt, PromptFactory
from deploytool.bench.runner import run_bench_sync
from deploytool.checks.targets import Target
from deploytool.errors import UsageError

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory):
    handle = sim_in_process(aggregate_tps=AGGREGATE_TPS)
    try:
        report = tmp_path_factory.mktemp("bench") / "run"
        run = run_bench(
            Target(url=handle.url, profile=None),
            method=tiny_method(sweep=True),
            report_dir=report,
            progress=False,
        )
    finally:
        handle.stop()
    return run, report


# Speeds measured on a shared machine: no figure is held to a wall clock. What holds under any
# load is the rule the sim keeps (its deadlines are absolute: a token never comes before its
# time, so no figure can beat the sim's setting; a late client only makes figures lower) and the
# ratios of figures from the same run, which the same load slows alike.
NEVER_FASTER = 1.05  # the schedule's own rounding (a token is due in the millisecond it is sent)
# the sim's decode speed where a test times nothing: its requests take little wall time
FAST_TPS = 5_000.0


def test_recovers_the_sims_speeds(sim_run):
    run, _ = sim_run
    decode = run.figure("decode_c1_tps").value
    per_request = run.figure("load_c4_per_request_tps").value
    aggregate = run.figure("load_c4_aggregate_tps").value
    prefill = run.figure("prefill_8000_tps").value
    # the rule: nothing is faster than the sim's schedule
    assert decode <= DECODE_TPS * NEVER_FASTER and per_request <= AGGREGATE_TPS / 4 * NEVER_FASTER
    assert aggregate <= AGGREGATE_TPS * NEVER_FASTER and prefill <= PREFILL_TPS * NEVER_FASTER
    # 4 running: each decodes at min(decode_tps, aggregate_tps / 4) = 200, half of one alone's
    # 400. Both are streams timed the same way in one run: a load slows them alike, while a
    # formula that counted the first token, or the warm-up, moves one and not the other.
    assert per_request / decode == pytest.approx((AGGREGATE_TPS / 4) / DECODE_TPS, rel=0.2)
    # four streams together make four times one; the groups' ragged ends (one request finishing
    # while others start) cost up to a quarter, never more than four
    assert 3.0 <= aggregate / per_request <= 4 * NEVER_FASTER
    # prefill is 100 times decode in the sim; a request's fixed costs (HTTP, counting 8,000 words)
    # on a loaded machine were seen at 40 ms on its 200 ms (84 times the run's decode); half the
    # sim's ratio is generous for that, and a prefill timed over the whole answer or over the
    # decode would fall far below it
    assert prefill / decode >= 0.5 * PREFILL_TPS / DECODE_TPS
    # the sweep goes up to the server's max running requests, no further
    assert [p.concurrency for p in run.sweep] == [1, 2, 4]
    # its one-user point is the decode figure measured again in the same run
    assert run.sweep[0].per_user_tps == pytest.approx(decode, rel=0.15)
    assert run.server["max_running_requests"] == MAX_RUNNING
    assert run.errors_total == 0 and run.complete
    # exact output lengths through ignore_eos + max_tokens
    assert {r.output_tokens for r in run.requests if r.group == "decode_c1"} == {60}


def test_prompts_unique_and_cache_stays_cold(sim_run):
    run, _ = sim_run
    prefixes = [r.prompt_prefix for r in run.requests]
    assert run.prompts_unique and len(set(prefixes)) == len(prefixes)
    assert run.cache_check.reported and run.cache_check.ok
    assert all(r.cached_tokens == 0 for r in run.requests if r.ok)
    # the sim counts our prompt like we do (one token per word): the sizes are what was asked for
    prefill = [r for r in run.requests if r.phase == "prefill"]
    assert all(abs(r.prompt_tokens - 8000) < 20 for r in prefill)


def test_warmup_recorded_but_not_measured(sim_run):
    run, _ = sim_run
    warm = [r for r in run.requests if r.phase == "warmup"]
    measured = [r for r in run.requests if r.phase != "warmup"]
    assert len(warm) == 1
    assert min(r.start for r in measured) >= max(r.end for r in warm)
    assert run.requests_total == len(measured)
    assert sum(g.requests for g in run.groups) == len(measured)


def test_reports_written(sim_run):
    run, report = sim_run
    data = json.loads((report / "results.json").read_text())
    assert data["schema"] == "deploytool.bench/1" and data["method"]["preset"] == "quick"
    assert len(data["requests"]) == len(run.requests) and data["requests"][0]["chunk_offsets"]
    html = (report / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 3  # decode, TTFT, prefill, Pareto plots inline
    assert "Pareto" in html and "decode, 1 request" in (report / "report.md").read_text()


class _FixedPrefix(PromptFactory):
    """Every prompt the same: what a careless benchmark does, and what the cache check must catch."""

    def make(self, target_tokens: int, label: str) -> Prompt:
        return Prompt(
            text="same prefix " * (target_tokens // 2), estimated_tokens=target_tokens, prefix="same"
        )


def test_cache_check_catches_a_prefix_cache_hit():
    handle = sim_in_thread(decode_tps=FAST_TPS)  # nothing timed: the sim answers fast
    try:
        runner = BenchRunner(
            Target(url=handle.url, profile=None),
            tiny_method(prefill_prompt_tokens=[2000], idle_timeout_s=3),
            progress=False,
        )
        runner.prompts = _FixedPrefix(seed=1)
        import asyncio

        run = asyncio.run(runner.run())
    finally:
        handle.stop()
    assert not run.prompts_unique
    assert run.cache_check.reported and not run.cache_check.ok and run.cache_check.requests_with_hits > 0


def test_http_500_counted_medians_over_completed():
    handle = sim_in_process(faults=("http_500_every=3",))
    try:
        run = run_bench_sync(Target(url=handle.url, profile=None), tiny_method(), progress=False)
    finally:
        handle.stop()
    measured = [r for r in run.requests if r.phase != "warmup"]
    failed = [r for r in measured if not r.ok]
    assert failed and run.errors_total == len(failed)
    assert all(r.status == 500 for r in failed)
    decode = run.group("decode_c1")
    assert decode.failed + decode.completed == decode.requests == 3
    assert sum(g.errors.get("HTTP 500", 0) for g in run.groups) == len(failed)
    # the completed requests, and only they, give the speed (no wall clock: the rule of the median)
    import statistics

    from deploytool.bench.stats import decode_tps

    completed = [decode_tps(r) for r in measured if r.group == "decode_c1" and r.ok]
    assert run.figure("decode_c1_tps").value == pytest.approx(statistics.median(completed))
    assert run.figure("decode_c1_tps").value <= DECODE_TPS * NEVER_FASTER
    assert run.figure("decode_c1_tps").failed == decode.failed


def test_dropped_streams_are_errors_and_nothing_hangs():
    handle = sim_in_thread(decode_tps=FAST_TPS, faults=("drop_stream=10",))  # nothing timed
    time.monotonic()
    try:
        run = run_bench_sync(Target(url=handle.url, profile=None), tiny_method(), progress=False)
    finally:
        handle.stop()
    # nothing hung: every request ended by the drop, none by its timeout (no wall clock asked)
    decode = run.group("decode_c1")
    assert decode.completed == 0 and decode.failed == 3
    assert run.figure("decode_c1_tps").value is None  # no completed request: no median, not zero
    assert sum(decode.errors.values()) == 3
    assert set(decode.errors) <= {"stream dropped", "stream ended without [DONE]"}, decode.errors
    # prefill answers (4 tokens) end before the cut: they complete
    assert run.group("prefill_8000").completed == 2


def test_compare_ratios_and_method_check(tmp_path):
    # the ratio compared is the one-request decode's; one request per load slot and one short
    # prefill keep the runs' other phases brief
    smaller = {"load_requests_per_slot": 1, "prefill_prompt_tokens": [2000], "prefill_prompts_each": 1}
    runs = []
    for name, speed in (("a", 200.0), ("b", 400.0)):
        handle = sim_in_process(decode_tps=speed)
        try:
            run_bench(
                Target(url=handle.url, profile=None),
                method=tiny_method(**smaller),
                report_dir=tmp_path / name,
                progress=False,
            )
        finally:
            handle.stop()
        runs.append(tmp_path / name)
    comparison = compare_runs(runs)
    # the one note a same-method comparison carries: the sampled gauges are shown, not compared
    assert comparison.same_method and [w for w in comparison.warnings if "gauges" not in w] == []
    row = next(r for r in comparison.rows if r.key == "decode_c1_tps")
    assert row.ratios[1] == pytest.approx(row.values[1] / row.values[0])
    # two runs one after the other on one machine: the load may change between them, hence a
    # wider bound than one run's ratios; a halved or unchanged speed still falls outside it
    assert row.ratios[1] == pytest.approx(2.0, rel=0.25)
    assert row.verdict(1) == "better" and "->" in row.change_text(1) and "x [" in row.change_text(1)

    # a run with another method is refused, or shown flagged when asked (its speeds are not compared:
    # the sim answers fast)
    handle = sim_in_thread(decode_tps=FAST_TPS)
    try:
        run_bench(
            Target(url=handle.url, profile=None),
            method=tiny_method(thinking=True, **smaller),
            report_dir=tmp_path / "c",
            progress=False,
        )
    finally:
        handle.stop()
    with pytest.raises(UsageError) as info:
        compare_runs([runs[0], tmp_path / "c" / "results.json"])
    assert "thinking" in str(info.value)
    mixed = compare_runs([runs[0], tmp_path / "c"], allow_mixed_methods=True)
    assert not mixed.same_method and "thinking" in mixed.method_differences
    assert any("DIFFERENT METHODS" in w for w in mixed.warnings)


def test_the_overlaid_pareto_picture_draws_each_runs_sweep(sim_run):
    from deploytool.bench.report import overlaid_pareto_plot, pareto_plot

    run, report = sim_run
    comparison = compare_runs([report, report])
    assert [len(s) for s in comparison.sweeps] == [len(run.sweep)] * 2
    for picture in (pareto_plot(run), overlaid_pareto_plot(comparison)):
        assert picture.startswith("data:image/png;base64,") and len(picture) > 1000
