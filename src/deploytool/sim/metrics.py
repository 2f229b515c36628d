"""Prometheus text exposition (format 0.0.4) with SGLang 0.5.23's metric names and labels.

sglang/srt/observability/metrics_collector.py: the scheduler's gauges carry model_name,
engine_type ("unified" without disaggregation), tp_rank, pp_rank and moe_ep_rank; the
tokenizer's counters carry model_name and engine_type, plus is_streaming on
prompt_tokens_total, generation_tokens_total and num_requests_total, and cache_source on
cached_tokens_total (only once a cached token was counted). spec_verify_calls_total counts
only with speculative decoding. The gauges spec_accept_length and cache_hit_rate describe the
last logging window, so a figure over a measurement window comes from counter differences
(deploytool.server.metrics_window), never from them.
"""

from __future__ import annotations

from deploytool.sim.engine import Engine, Histogram

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{_label(str(v))}"' for k, v in pairs.items()) + "}"


def render_metrics(engine: Engine) -> str:
    model = engine.settings.served_model_name
    base = {"model_name": model, "engine_type": "unified"}
    sched = {**base, "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
    stats = engine.stats
    lines: list[str] = []

    def head(name: str, kind: str, help_text: str) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")

    def counter_by_stream(name: str, help_text: str, column: int) -> None:
        head(name, "counter", help_text)
        for streaming, row in stats.by_stream.items():
            lines.append(f"{name}_total{_labels({**base, 'is_streaming': streaming})} {_num(row[column])}")

    counter_by_stream("sglang:prompt_tokens", "Number of prefill tokens processed.", 0)
    counter_by_stream("sglang:generation_tokens", "Number of generation tokens processed.", 1)
    counter_by_stream("sglang:num_requests", "Number of requests processed.", 2)
    head("sglang:cached_tokens", "counter", "Number of cached prompt tokens by source (device/host/storage).")
    if stats.cached_tokens:  # prometheus shows a labelled series only once it was incremented
        lines.append(
            f"sglang:cached_tokens_total{_labels({**base, 'cache_source': 'device'})} {_num(stats.cached_tokens)}"
        )
    if engine.settings.speculative_enabled:
        head("sglang:spec_verify_calls", "counter", "Number of speculative decoding verification calls.")
        lines.append(f"sglang:spec_verify_calls_total{_labels(sched)} {_num(stats.spec_verify_calls)}")
    head("sglang:num_aborted_requests", "counter", "Number of requests aborted.")
    lines.append(f"sglang:num_aborted_requests_total{_labels(base)} {_num(stats.aborted)}")

    prompt_total = stats.prompt_tokens
    hit_rate = stats.cached_tokens / prompt_total if prompt_total else 0.0
    for name, help_text, value in (
        ("sglang:num_running_reqs", "The number of running requests.", len(engine.running)),
        ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", engine.queued),
        ("sglang:token_usage", "The token usage.", engine.token_usage()),
        ("sglang:cache_hit_rate", "The prefix cache hit rate.", hit_rate),
        (
            "sglang:spec_accept_length",
            "The average acceptance length of speculative decoding.",
            engine.settings.spec_accept_length,
        ),
        ("sglang:gen_throughput", "The generation throughput (token/s).", stats.gen_throughput()),
    ):
        head(name, "gauge", help_text)
        lines.append(f"{name}{_labels(sched)} {_num(value)}")
    _histogram(
        lines,
        "sglang:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        stats.ttft,
        base,
    )
    _histogram(
        lines,
        "sglang:e2e_request_latency_seconds",
        "Histogram of End-to-end request latency in seconds",
        stats.e2e,
        base,
    )
    _histogram(
        lines,
        "sglang:request_time_per_output_token_seconds",
        "Per-request TPOT in seconds: (finished_time - first_token_time) / (completion_tokens - 1).",
        stats.tpot,
        base,
    )
    return "\n".join(lines) + "\n"


def _histogram(lines: list[str], name: str, help_text: str, hist: Histogram, labels: dict[str, str]) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} histogram")
    for bound, count in zip(hist.buckets, hist.counts, strict=True):
        lines.append(f"{name}_bucket{_labels({**labels, 'le': _num(bound)})} {count}")
    lines.append(f"{name}_bucket{_labels({**labels, 'le': '+Inf'})} {hist.n}")
    lines.append(f"{name}_sum{_labels(labels)} {_num(hist.total)}")
    lines.append(f"{name}_count{_labels(labels)} {hist.n}")


def _num(value: float) -> str:
    return repr(float(value))
