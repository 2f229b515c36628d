"""Figures over one measurement window, from differences of SGLang's /metrics counters.

SGLang's gauges cannot give a figure for a window: sglang:spec_accept_length and
sglang:cache_hit_rate describe only the last logging window or batch, and /server_info's
avg_spec_accept_length is cumulative since start (sglang/srt/observability/metrics_collector.py,
managers/scheduler_components/internal_state.py). The counters can: read /metrics before and
after a phase, subtract, and the phase alone is measured.

  cached-token share      Δ sglang:cached_tokens_total / Δ sglang:prompt_tokens_total
                          (cached_tokens_total, labelled by cache_source, appears only once a
                          cached token was counted: absent with prompt_tokens present means 0)
  spec accept length      Δ sglang:generation_tokens_total / Δ sglang:spec_verify_calls_total
                          (tokens per verification step of a request; only with speculative decoding)
  output throughput       Δ sglang:generation_tokens_total / window seconds

Labelled series (is_streaming, cache_source, ranks) are summed. /metrics exists only with
--enable-metrics; without it every figure is None and `why` says so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

PROMPT = "sglang:prompt_tokens_total"
GENERATED = "sglang:generation_tokens_total"
CACHED = "sglang:cached_tokens_total"
VERIFY = "sglang:spec_verify_calls_total"
REQUESTS = "sglang:num_requests_total"
COUNTERS = (PROMPT, GENERATED, CACHED, VERIFY, REQUESTS)


@dataclass
class CounterSnapshot:
    """The counters at one instant (time.monotonic()); `counters` is None when /metrics could not be read."""

    at: float
    counters: dict[str, float] | None
    why: str | None = None


@dataclass
class Window:
    seconds: float
    deltas: dict[str, float] = field(default_factory=dict)
    why: str | None = None  # why there are no figures

    @property
    def measured(self) -> bool:
        return self.why is None

    @property
    def prompt_tokens(self) -> float | None:
        return self.deltas.get(PROMPT)

    @property
    def cached_tokens(self) -> float | None:
        if PROMPT not in self.deltas:
            return None
        return self.deltas.get(CACHED, 0.0)

    @property
    def cached_share(self) -> float | None:
        prompt = self.prompt_tokens
        if not prompt:
            return None
        return (self.cached_tokens or 0.0) / prompt

    @property
    def spec_accept_length(self) -> float | None:
        verify = self.deltas.get(VERIFY)
        generated = self.deltas.get(GENERATED)
        return generated / verify if verify and generated is not None else None

    @property
    def output_tps(self) -> float | None:
        generated = self.deltas.get(GENERATED)
        return generated / self.seconds if generated is not None and self.seconds > 0 else None

    def to_json(self) -> dict[str, Any]:
        return {"seconds": round(self.seconds, 3), "deltas": self.deltas, "why": self.why,
                "cached_share": self.cached_share, "spec_accept_length": self.spec_accept_length,
                "output_tps": self.output_tps}


def counters_from(metrics: dict[str, float] | None) -> dict[str, float] | None:
    """The counters this module uses, from a parsed /metrics (bench.server.parse_prometheus)."""
    if metrics is None:
        return None
    return {name: metrics[name] for name in COUNTERS if name in metrics}


async def snapshot(client: Any, timeout: float = 10.0) -> CounterSnapshot:
    """Read /metrics once through an EndpointClient."""
    from .bench.server import parse_prometheus

    at = time.monotonic()
    try:
        response = await client.get("/metrics", timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - unreadable is an answer: the window says why
        return CounterSnapshot(at, None, f"/metrics unreadable: {type(exc).__name__}: {exc}")
    if response.status_code != 200:
        return CounterSnapshot(at, None, f"/metrics answered HTTP {response.status_code} "
                                         "(SGLang serves it only with --enable-metrics)")
    return CounterSnapshot(at, counters_from(parse_prometheus(response.text)))


def window(before: CounterSnapshot, after: CounterSnapshot) -> Window:
    seconds = max(0.0, after.at - before.at)
    if before.counters is None or after.counters is None:
        return Window(seconds, why=before.why or after.why or "/metrics unreadable")
    if PROMPT not in after.counters:
        return Window(seconds, why=f"/metrics has no {PROMPT}")
    deltas = {}
    for name in COUNTERS:
        if name in after.counters:
            delta = after.counters[name] - before.counters.get(name, 0.0)
            if delta < 0:  # a restarted server: the window means nothing
                return Window(seconds, why=f"{name} went down ({before.counters.get(name)} -> "
                                           f"{after.counters[name]}): the server restarted during the window")
            deltas[name] = delta
    return Window(seconds, deltas)
