"""Regression tests for review findings on bench: prompt prefixes vs a fine-grained prefix cache,
the cache check's fixed allowance, requests cut by the run's deadline, /metrics aggregation and
the command's exit codes. The sim serves on loopback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from bench_helpers import BENCH_TINY_PROFILE, sim_in_thread, tiny_method
from typer.testing import CliRunner

from deploytool.bench.assemble import cache_check as _cache_check
from deploytool.bench.prompts import PromptFactory
from deploytool.bench.results import RequestRecord
from deploytool.bench.runner import run_bench_sync
from deploytool.checks.targets import Target
from deploytool.cli.app import app
from deploytool.server.facts import parse_prometheus
from deploytool.sim import count_tokens

pytestmark = pytest.mark.timeout(120)


# --- 2. prompt prefixes and the cache check -----------------------------------------------------------


def test_prompt_opens_with_its_random_nonce():
    factory = PromptFactory(seed=1, run_id="abcd1234")
    first, second = factory.make(64, "decode_c1"), factory.make(64, "decode_c1")
    assert re.match(r"^\[[0-9a-f]{16} bench abcd1234 decode_c1 #1\] ", first.text), first.text
    assert first.text.startswith(first.prefix) and second.prefix.endswith("#2]")
    assert first.text[:2] != second.text[:2] or first.text[:17] != second.text[:17]


def test_bench_prompts_stay_cold_on_a_per_token_prefix_cache():
    """The sim with 8-character cache blocks behaves like SGLang's per-token radix cache: only
    the serialized role marker may be shared, never bench's own prefix."""
    handle = sim_in_thread(prefix_cache_block_chars=8)
    try:
        run = run_bench_sync(
            Target(url=handle.url, profile=None), tiny_method(prefill_prompt_tokens=[2000]), progress=False
        )
    finally:
        handle.stop()
    opening = count_tokens("<|user|>")
    assert run.errors_total == 0
    assert max(r.cached_tokens for r in run.requests if r.ok) <= opening
    assert run.cache_check.reported and run.cache_check.ok, run.cache_check.message


def _record(prompt_tokens: int, cached: int) -> RequestRecord:
    return RequestRecord(
        phase="decode",
        group="decode_c1",
        concurrency=1,
        index=0,
        ok=True,
        error=None,
        status=200,
        prompt_prefix="[x]",
        prompt_tokens_estimated=prompt_tokens,
        prompt_tokens=prompt_tokens,
        cached_tokens=cached,
        max_tokens=8,
        output_tokens=8,
        output_tokens_source="usage",
        reasoning_tokens=0,
        answer_tokens=8,
        finish_reason="length",
        start=0.0,
        first_token=0.1,
        first_answer=0.1,
        last_token=0.2,
        end=0.2,
    )


def test_cache_check_tolerates_a_chat_templates_shared_opening():
    check = _cache_check([_record(100, 12), _record(128, 16)], 0.02)
    assert check.ok and check.requests_with_hits == 0, check.message
    assert check.allowed_tokens == 16
    check = _cache_check([_record(100, 12), _record(100, 17)], 0.02)
    assert not check.ok and check.requests_with_hits == 1
    check = _cache_check([_record(10_000, 150)], 0.02)  # 1.5%: within the percentage
    assert check.ok


# --- 6. the run's deadline ----------------------------------------------------------------------------


def test_a_request_cut_by_the_runs_deadline_is_not_a_server_failure():
    handle = sim_in_thread(decode_tps=20)
    try:
        run = run_bench_sync(
            Target(url=handle.url, profile=None),
            tiny_method(warmup_requests=0, decode_output_tokens=200, run_timeout_s=1.5, request_timeout_s=20),
            progress=False,
        )
    finally:
        handle.stop()
    assert not run.complete
    cut = [r for r in run.requests if not r.ok]
    assert len(cut) == 1 and "cut by the run's time bound" in cut[0].error, [r.error for r in run.requests]
    assert run.errors_total == 0  # the server did nothing wrong
    assert run.group("decode_c1").failed == 0
    assert any("time bound" in n for n in run.notes)


# --- 8. /metrics --------------------------------------------------------------------------------------


def test_metrics_sum_counters_and_take_the_max_of_gauges():
    text = """\
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{dp_rank="0"} 100
sglang:generation_tokens_total{dp_rank="1"} 50
sglang:num_running_reqs{dp_rank="0"} 3
sglang:num_running_reqs{dp_rank="1"} 4
sglang:token_usage{dp_rank="0"} 0.6
sglang:token_usage{dp_rank="1"} 0.7
sglang:spec_accept_length{dp_rank="0"} 3.2
sglang:spec_accept_length{dp_rank="1"} 3.2
sglang:cache_hit_rate{dp_rank="0"} 0.1
sglang:cache_hit_rate{dp_rank="1"} 0.3
sglang:e2e_request_latency_seconds_count{dp_rank="0"} 5
sglang:e2e_request_latency_seconds_count{dp_rank="1"} 6
"""
    metrics = parse_prometheus(text)
    assert metrics["sglang:generation_tokens_total"] == 150
    assert metrics["sglang:num_running_reqs"] == 7
    assert metrics["sglang:token_usage"] == 0.7
    assert metrics["sglang:spec_accept_length"] == 3.2
    assert metrics["sglang:cache_hit_rate"] == 0.3
    assert metrics["sglang:e2e_request_latency_seconds_count"] == 11


# --- 7. exit codes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("fault, code", [("http_500_every=1", 6), ("http_500_every=3", 1)])
def test_bench_exit_code_says_whether_anything_was_measured(tmp_path: Path, fault: str, code: int):
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "bench-tiny.yaml").write_text(BENCH_TINY_PROFILE)
    handle = sim_in_thread(faults=(fault,))
    try:
        result = CliRunner().invoke(
            app,
            [
                "bench",
                "--url",
                handle.url,
                "--profile",
                "bench-tiny",
                "--profiles-dir",
                str(folder),
                "--quick",
            ],
            catch_exceptions=False,
        )
    finally:
        handle.stop()
    assert result.exit_code == code, result.output
