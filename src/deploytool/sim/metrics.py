"""Prometheus text exposition (format 0.0.4) with SGLang's metric names, labelled by model_name."""

from __future__ import annotations

from deploytool.sim.engine import Engine, Histogram

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_metrics(engine: Engine) -> str:
    model = _label(engine.settings.served_model_name)
    labels = f'{{model_name="{model}"}}'
    stats = engine.stats
    lines: list[str] = []

    def metric(name: str, kind: str, help_text: str, value: float, sample: str | None = None) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        lines.append(f"{sample or name}{labels} {_num(value)}")

    prompt_total = stats.prompt_tokens
    hit_rate = stats.cached_tokens / prompt_total if prompt_total else 0.0
    # prometheus_client names a counter "x" and exposes it as "x_total", as SGLang's do
    metric("sglang:prompt_tokens", "counter", "Number of prefill tokens processed.", prompt_total,
           "sglang:prompt_tokens_total")
    metric("sglang:generation_tokens", "counter", "Number of generation tokens processed.",
           stats.generation_tokens, "sglang:generation_tokens_total")
    metric("sglang:cached_tokens", "counter", "Number of cached prompt tokens.", stats.cached_tokens,
           "sglang:cached_tokens_total")
    metric("sglang:num_requests", "counter", "Number of requests processed.", stats.requests,
           "sglang:num_requests_total")
    metric("sglang:num_aborted_requests", "counter", "Number of requests aborted.", stats.aborted,
           "sglang:num_aborted_requests_total")
    metric("sglang:num_running_reqs", "gauge", "The number of running requests.", len(engine.running))
    metric("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.", engine.queued)
    metric("sglang:token_usage", "gauge", "The token usage of the KV pool.", engine.token_usage())
    metric("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", hit_rate)
    metric("sglang:spec_accept_length", "gauge", "The average speculative accept length.",
           engine.settings.spec_accept_length)
    metric("sglang:gen_throughput", "gauge", "The generation throughput (token/s).", stats.gen_throughput())
    _histogram(lines, "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
               stats.ttft, model)
    _histogram(lines, "sglang:e2e_request_latency_seconds", "Histogram of end-to-end request latency in seconds.",
               stats.e2e, model)
    return "\n".join(lines) + "\n"


def _histogram(lines: list[str], name: str, help_text: str, hist: Histogram, model: str) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} histogram")
    for bound, count in zip(hist.buckets, hist.counts):
        lines.append(f'{name}_bucket{{le="{_num(bound)}",model_name="{model}"}} {count}')
    lines.append(f'{name}_bucket{{le="+Inf",model_name="{model}"}} {hist.n}')
    lines.append(f'{name}_sum{{model_name="{model}"}} {_num(hist.total)}')
    lines.append(f'{name}_count{{model_name="{model}"}} {hist.n}')


def _num(value: float) -> str:
    return repr(float(value))
