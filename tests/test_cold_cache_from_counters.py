"""The cold-cache figure without per-request cached_tokens (SGLang reports them only with
--enable-cache-report): from /metrics counter differences over the measured phases, and "not
measured" (a failing gate with a hint) when neither exists. Also the window arithmetic itself."""

from __future__ import annotations

import asyncio

import pytest

from deploytool.bench import BenchRunner, build_method
from deploytool.checks.targets import Target
from deploytool.server.metrics_window import (
    CACHED,
    GENERATED,
    PROMPT,
    VERIFY,
    CounterSnapshot,
    counters_from,
    window,
)
from deploytool.sim import SimSettings, serve_in_thread

pytestmark = pytest.mark.timeout(180)


def _bench(**sim: object):
    settings = SimSettings(
        startup_seconds=0,
        log_requests=False,
        decode_tps=4000,
        prefill_tps=2_000_000,
        default_chat_template_kwargs='{"enable_thinking": false}',
        **sim,
    )
    method = build_method(quick=True).model_copy(
        update={
            "repeats": 1,
            "warmup_requests": 1,
            "decode_requests": 3,
            "decode_output_tokens": 20,
            "load_concurrency": [2],
            "load_requests_per_slot": 2,
            "load_output_tokens": 20,
            "prefill_prompt_tokens": [1000],
            "prefill_prompts_each": 2,
            "prefill_output_tokens": 4,
        }
    )
    with serve_in_thread(settings, wait_ready=True) as handle:
        return asyncio.run(BenchRunner(Target(url=handle.url, profile=None), method, progress=False).run())


def test_metrics_only_server_gets_its_cold_cache_figure_from_the_counters() -> None:
    run = _bench(enable_metrics=True)  # no cache report: usage has no prompt_tokens_details
    assert all(r.cached_tokens is None for r in run.requests)
    check = run.cache_check
    assert check.source == "metrics" and check.reported and check.ok, check.message
    assert check.max_cached_fraction == 0.0
    windows = run.server["windows"]
    assert set(windows) == {g.name for g in run.groups}
    decode = windows["decode_c1"]
    # 3 requests of 20 tokens each, generated inside that phase alone
    assert decode["deltas"][GENERATED] == 60 and decode["output_tps"] > 0
    assert run.server["weight_version"] == run.server["weight_version_at_end"] == "default"


def test_prefix_cache_hits_in_the_counters_fail_the_cold_cache_check() -> None:
    run = _bench(enable_metrics=True, cached_prompt_fraction=0.5)  # the sim's test option
    check = run.cache_check
    assert check.source == "metrics" and not check.ok
    assert check.max_cached_fraction == pytest.approx(0.5, abs=0.05)
    assert "prefix cache" in check.message


def test_neither_cache_report_nor_metrics_is_not_measured_and_fails_with_a_hint() -> None:
    run = _bench()
    check = run.cache_check
    assert check.source == "none" and not check.reported and not check.ok
    assert "not measured" in check.message
    assert "enable-cache-report: true" in check.message and "enable-metrics: true" in check.message
    # the rest of what /metrics gives is "not measured" too, and the run goes on without it
    assert all(
        g.idle_wait["idle"] is None and g.server_requests is None and not g.contaminated for g in run.groups
    )
    assert run.groups and all(g.completed for g in run.groups) and not run.invalid_groups
    assert any(n.startswith("not measured: idle-server wait") and "404" in n for n in run.notes)
    assert run.server["window_measured"]["why"] and not run.server["server_figures"].get("cache_hit_rate")


def test_window_figures_are_counter_differences() -> None:
    before = CounterSnapshot(10.0, {PROMPT: 1000, GENERATED: 500, VERIFY: 100})
    after = CounterSnapshot(12.0, {PROMPT: 3000, GENERATED: 1300, VERIFY: 300, CACHED: 100})
    w = window(before, after)
    assert w.measured and w.seconds == 2.0
    assert w.cached_share == pytest.approx(100 / 2000)  # cached_tokens_total appeared inside the window
    assert w.spec_accept_length == pytest.approx(800 / 200)  # not the cumulative 1300 / 300
    assert w.output_tps == pytest.approx(400)
    assert (
        window(CounterSnapshot(0, None, "/metrics answered HTTP 404"), after).why
        == "/metrics answered HTTP 404"
    )
    restarted = window(after, before)
    assert not restarted.measured and "restarted" in restarted.why
    assert counters_from({PROMPT: 1.0, "sglang:token_usage": 0.5}) == {PROMPT: 1.0}


TINY_BENCH = {
    "warmup_requests": 1,
    "decode_requests": 3,
    "decode_output_tokens": 20,
    "load_concurrency": [2],
    "load_requests_per_slot": 2,
    "load_output_tokens": 20,
    "prefill_prompt_tokens": [1000],
    "prefill_prompts_each": 2,
    "prefill_output_tokens": 4,
}


def _performance(tmp_path, **sim):
    from qualify_helpers import qualify, sim_profile

    settings = SimSettings(
        startup_seconds=0,
        log_requests=False,
        decode_tps=4000,
        prefill_tps=2_000_000,
        default_chat_template_kwargs='{"enable_thinking": false}',
        **sim,
    )
    with serve_in_thread(settings, wait_ready=True) as handle:
        profile = sim_profile(handle.port)
        profile.bench = dict(TINY_BENCH)
        profile.qualify = {"performance": {"quick": True}}
        report = qualify(handle.url, tmp_path, profile=profile, suites=["performance"])
    return report.suite("performance")


def test_the_performance_suites_cold_cache_gate_follows_the_counters(tmp_path) -> None:
    cold = _performance(tmp_path / "cold", enable_metrics=True)
    gate = next(g for g in cold.gates if g.name == "prefix cache stayed cold")
    assert gate.passed and cold.figures["cache_check_source"] == "metrics", cold.reason
    assert set(cold.figures["metrics_windows"]) >= {"decode_c1", "load_c2"}
    hit = _performance(tmp_path / "hit", enable_metrics=True, cached_prompt_fraction=0.5)
    gate = next(g for g in hit.gates if g.name == "prefix cache stayed cold")
    assert not gate.passed and hit.verdict.value == "failed"
    blind = _performance(tmp_path / "blind")  # neither metrics nor cache report: not measured, fails
    gate = next(g for g in blind.gates if g.name == "prefix cache stayed cold")
    assert not gate.passed and "enable-metrics: true" in gate.detail
    idle = next(g for g in blind.gates if g.name == "phases measured on an idle server")
    assert not idle.passed and idle.measured is None and "not measured" in idle.detail
    idle = next(g for g in cold.gates if g.name == "phases measured on an idle server")
    assert idle.passed and idle.measured == 0
