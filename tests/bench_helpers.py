"""What the bench tests share: the reference runtime at known speeds (in its own process for
figures that are timed, in a thread for checks that time nothing), a small bench method, and a
profile whose quick method is tiny."""

from __future__ import annotations

from sim_process import SimProcess

from deploytool.bench import build_method
from deploytool.sim import SimSettings, serve_in_thread

DECODE_TPS = 400.0
AGGREGATE_TPS = 800.0
PREFILL_TPS = 40_000.0
MAX_RUNNING = 4


def _sim_process(settings: SimSettings) -> SimProcess:
    """The sim in its own process. Timing tests need it: a sim in a thread of the test process
    shares the GIL with the bench client, and a stall on either side shows up as a burst of
    tokens (seen: a 40 ms stall after an HTTP 500 fault inflating one request's decode speed)."""
    flags = {
        "decode_tps": settings.decode_tps,
        "prefill_tps": settings.prefill_tps,
        "max_running_requests": settings.max_running_requests,
        "enable_metrics": True,
        "enable_cache_report": True,
        "default_chat_template_kwargs": '{"enable_thinking": false}',
        "fault": list(settings.faults),
    }
    if settings.aggregate_tps:
        flags["aggregate_tps"] = settings.aggregate_tps
    return SimProcess(**flags)


def sim_settings(**kw) -> SimSettings:
    return SimSettings(
        startup_seconds=0,
        log_requests=False,
        default_chat_template_kwargs='{"enable_thinking": false}',
        enable_metrics=True,
        enable_cache_report=True,
        decode_tps=kw.pop("decode_tps", DECODE_TPS),
        prefill_tps=kw.pop("prefill_tps", PREFILL_TPS),
        max_running_requests=kw.pop("max_running_requests", MAX_RUNNING),
        **kw,
    )


def sim_in_process(**kw):
    """A sim for figures that are timed: its own process."""
    return _sim_process(sim_settings(**kw))


def sim_in_thread(**kw):
    """A sim for checks that time nothing (cheaper to start)."""
    return serve_in_thread(sim_settings(**kw), port=0, wait_ready=True)


def tiny_method(**kw):
    """A small method: a few short requests per phase, one prefill size long enough to time."""
    settings = {
        "quick": True,
        "warmup_requests": 1,
        "warmup_output_tokens": 8,
        "decode_requests": 3,
        "decode_output_tokens": 60,
        "decode_prompt_tokens": 64,
        "load_concurrency": [4],
        "load_requests_per_slot": 2,
        "load_output_tokens": 60,
        "prefill_prompt_tokens": [8000],
        "prefill_prompts_each": 2,
        "sweep_output_tokens": 40,
        "sweep_requests_per_slot": 1,
        "metrics_interval_s": 0.2,
        "request_timeout_s": 20,
        "run_timeout_s": 60,
        "repeats": 1,
    }
    settings.update(kw)
    return build_method(**settings)


# A profile whose quick method is tiny, so the CLI and the suite run in a second or two.
BENCH_TINY_PROFILE = """\
name: bench-tiny
extends: sim
qualify:
  suites: [performance]
  performance: {min_decode_tps_c1: 150, max_regression_pct: 10, quick: true}
bench:
  quick:
    warmup_output_tokens: 8
    decode_requests: 2
    decode_output_tokens: 40
    load_concurrency: [2]
    load_requests_per_slot: 1
    load_output_tokens: 40
    prefill_prompt_tokens: [2000]
    prefill_prompts_each: 1
    metrics_interval_s: 0.2
"""
