"""Every named workload, run against the reference runtime, recovers the speeds the sim is
configured with: decode, aggregate, prefill, the decode slowdown with context, and prefix-cache
hits on the later turns of a resent conversation.

No wall clock: a speed never exceeds the sim's setting (its deadlines are absolute), and the
shape of a curve is checked as ratios of figures of the same run (12%), which a loaded machine
slows alike; narrow enough that a wrong formula (first token counted in decode, cache hits
ignored, warm-up measured) fails.
"""

from __future__ import annotations

import pytest
from sim_process import SimProcess

from deploytool.bench import build_method, run_bench
from deploytool.bench.workloads.open_loop import meets_slos
from deploytool.checks.targets import Target

pytestmark = pytest.mark.timeout(180)

DECODE = 200.0
AGGREGATE = 500.0
PREFILL = 40_000.0
SLOWDOWN = 20_000  # decode halves at 20K tokens of context
RUNNING = 4


@pytest.fixture(scope="module")
def sim():
    with SimProcess(
        decode_tps=DECODE,
        aggregate_tps=AGGREGATE,
        prefill_tps=PREFILL,
        max_running_requests=RUNNING,
        decode_slowdown_tokens=SLOWDOWN,
        prefix_cache_block_chars=32,
        enable_metrics=True,
        enable_cache_report=True,
    ) as proc:  # counters and per-request cached_tokens
        yield proc


def _run(sim, workload: str, settings: dict, **extra):
    method = build_method(
        quick=True,
        workload=workload,
        workload_settings={workload: settings},
        repeats=1,
        warmup_requests=1,
        warmup_output_tokens=8,
        metrics_interval_s=0.2,
        request_timeout_s=60,
        run_timeout_s=120,
        **extra,
    )
    run = run_bench(Target(url=sim.url, profile=None), method=method, report_dir=None, progress=False)
    assert run.errors_total == 0 and run.complete and not run.invalid_groups
    assert (
        run.workload == workload
        and run.method["workload_settings"][workload][
            "output_tokens" if "output_tokens" in settings else next(iter(settings))
        ]
        is not None
    )
    return run


# No figure is held to a wall clock (the machine is shared): the sim's deadlines are absolute, so
# no figure beats its schedule (a late client only makes them lower), and figures of one run
# are compared as ratios, which one load slows alike.
NEVER_FASTER = 1.05  # the schedule's own rounding


def _expected_decode(context: float) -> float:
    return DECODE / (1 + context / SLOWDOWN)


def test_long_context_recovers_the_decode_slowdown(sim):
    out = 100
    run = _run(
        sim, "long-context", {"context_tokens": [1_000, 10_000], "requests_each": 2, "output_tokens": out}
    )
    values = {size: run.figure(f"longctx_{size}_decode_tps").value for size in (1_000, 10_000)}
    for size in (1_000, 10_000):
        # the rule: never faster than the sim's schedule; context grows from the prompt to
        # prompt + output while decoding: take the middle
        assert values[size] <= _expected_decode(size + out / 2) * NEVER_FASTER
        # and never before its prefill (the sim's own handling on a loaded machine only adds)
        assert run.figure(f"longctx_{size}_ttft_s").value >= 0.8 * size / PREFILL
    # the slowdown is what the figures show, as a ratio of two figures of one run (a load slows both)
    assert values[10_000] / values[1_000] == pytest.approx(
        _expected_decode(10_000 + out / 2) / _expected_decode(1_000 + out / 2), rel=0.12
    )


def test_input_ablation_traces_interactivity_against_input_length(sim):
    out = 64
    run = _run(
        sim,
        "input-ablation",
        {"input_tokens": [500, 4_000, 16_000], "requests_each": 2, "output_tokens": out},
    )
    sizes = (500, 4_000, 16_000)
    values = [run.figure(f"ablation_{n}_decode_tps").value for n in sizes]
    for n, value in zip(sizes, values, strict=False):  # the rule: never faster than the sim's schedule
        assert value <= _expected_decode(n + out / 2) * NEVER_FASTER
    # the trace's shape, as ratios to the run's own shortest input (one load slows them alike)
    for n, value in zip(sizes[1:], values[1:], strict=False):
        assert value / values[0] == pytest.approx(
            _expected_decode(n + out / 2) / _expected_decode(500 + out / 2), rel=0.12
        )
    assert values[0] > values[1] > values[2]


def test_agentic_replay_hits_the_cache_on_later_turns_and_sweeps_concurrency(sim):
    # a first prompt whose cold prefill (225 ms) dwarfs the sim's handling of any request (tens of
    # ms, up to 46 ms on a loaded machine): with 3,000 tokens (75 ms) a later turn's handling alone
    # came within 0.1 ms of half the first turn's time under a load of 7.5 on two cores
    turns, out, user, first_tokens = 4, 40, 60, 9_000
    run = _run(
        sim,
        "agentic",
        {
            "first_prompt_tokens": first_tokens,
            "turn_user_tokens": user,
            "output_tokens_per_turn": out,
            "turns": turns,
            "concurrency": [1, 2],
        },
    )
    records = [r for r in run.requests if r.phase == "agentic"]
    assert len(records) == (1 + 2) * turns
    for r in records:
        assert r.output_tokens == out
        if r.turn == 0:  # the cold-cache rule: a conversation's first turn finds nothing cached
            assert r.cached_tokens <= 16
        else:  # later turns: the previous turn's prompt and answer are cached (block granularity)
            prev = next(
                p
                for p in records
                if p.group == r.group and p.conversation == r.conversation and p.turn == r.turn - 1
            )
            assert r.cached_tokens >= 0.95 * (prev.prompt_tokens + out) - 16
            assert r.prompt_tokens - r.cached_tokens < user + 40
    assert run.cache_check.ok  # first turns only
    for c in (1, 2):
        group = run.group(f"agentic_c{c}")
        mine = [r for r in records if r.group == group.name]
        expected_share = sum(r.cached_tokens for r in mine) / sum(r.prompt_tokens for r in mine)
        # the figure comes from the server's counters; the responses' usage must tell the same story
        share = run.figure(f"agentic_c{c}_cache_hit_share").value
        assert share == pytest.approx(expected_share, rel=0.02) and share > 0.6
        first = run.figure(f"agentic_c{c}_first_turn_ttft_s").value
        later = run.figure(f"agentic_c{c}_later_turns_ttft_s").value
        # prefill time plus the sim's own request handling (parsing, a thread hop: tens of ms)
        assert first >= 0.8 * first_tokens / PREFILL  # never before its prefill; a load only adds
        assert later < first / 2  # a cached prefix is not prefilled again
        assert len(run.details["agentic_ttft_by_turn_s"][group.name][0]) == turns
    # one user decodes at the configured speed (slowed by its ~9K-token context)
    # (the rule: never faster than the sim's schedule; the ratio to the run's c2 figure below)
    assert run.figure("agentic_c1_per_user_tps").value <= _expected_decode(first_tokens + 200) * NEVER_FASTER
    # two users share nothing but their own speed: per-GPU throughput about doubles
    assert run.figure("agentic_c2_per_gpu_tps").value > 1.5 * run.figure("agentic_c1_per_gpu_tps").value
    assert [p.concurrency for p in run.sweep] == [1, 2] and {p.curve for p in run.sweep} == {"agentic"}


def test_open_loop_load_and_goodput(sim):
    out = 50
    run = _run(
        sim,
        "open-loop",
        {
            "rates": [4.0],
            "requests_per_rate": 12,
            "prompt_tokens": 2_000,
            "output_tokens": out,
            "slo_ttft_s": 1.0,
            "slo_itl_p99_s": 0.5,
        },
    )
    reqs = [r for r in run.requests if r.phase == "open-loop"]
    # sent on the Poisson schedule, not one after another: in the schedule's order, and a request
    # goes out while an earlier one is still answering (12 requests at 4/s, each over half a
    # second). No clock bound: the records keep no instant of the schedule's start, and a client
    # starved of CPU sends late, never early, which shifts every offset it could be held to.
    assert any(
        later.start < earlier.end for earlier in reqs for later in reqs if later.scheduled > earlier.scheduled
    )
    by_schedule = sorted(reqs, key=lambda r: r.scheduled)
    assert [r.start for r in by_schedule] == sorted(r.start for r in reqs)
    assert run.figure("poisson_r4_goodput").value == 1.0  # loose SLOs: every request within
    assert run.figure("poisson_r4_ttft_s").value >= 0.8 * 2_000 / PREFILL  # never before its prefill
    group = run.group("poisson_r4")
    # ITL and TPOT: at most `running` share the aggregate; one alone decodes at DECODE
    assert group.tpot_median_s >= 1 / DECODE * 0.85  # never faster than one alone decodes
    assert group.itl_p50_s <= group.itl_p95_s <= group.itl_p99_s <= group.itl_max_s
    # an SLO tighter than prefill itself: no request meets it
    assert not any(meets_slos(r, 2_000 / PREFILL / 2, 0.5) for r in reqs)


def test_the_table_reports_itl_and_tpot_for_every_group(sim):
    method = build_method(
        quick=True,
        repeats=2,
        warmup_requests=1,
        warmup_output_tokens=8,
        decode_requests=2,
        decode_output_tokens=60,
        load_requests_per_slot=1,
        load_output_tokens=60,
        prefill_prompt_tokens=[2_000],
        prefill_prompts_each=1,
        request_timeout_s=60,
    )
    run = run_bench(Target(url=sim.url, profile=None), method=method, report_dir=None, progress=False)
    assert {g.repeat for g in run.groups} == {0, 1}
    for g in run.groups:
        assert g.itl_p99_s is not None and g.tpot_median_s is not None and g.idle_wait["idle"] is True
    decode = run.figure("decode_c1_tps")
    assert (
        len(decode.repeat_values) == 2
        and len(decode.samples) == 2
        and all(len(s) == 2 for s in decode.samples)
    )
    assert decode.spread[0] <= decode.value <= decode.spread[1]
    assert decode.value <= _expected_decode(200) * NEVER_FASTER  # the rule; its spread is checked above
