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

The same snapshots carry the load gauges, so bench can wait for an idle server before a phase
and tell afterwards whether the server did more than the phase sent (docs/bench.md):

    idle = await wait_idle(client, timeout_s=120)   # running == 0 and queued == 0, bounded
    before = await snapshot(client)
    ... run the phase ...
    w = window(before, await snapshot(client))
    extra = w.delta(REQUESTS) - sent                # > 0: leftover work ran meanwhile
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field
from typing import Any

PROMPT = "sglang:prompt_tokens_total"
GENERATED = "sglang:generation_tokens_total"
CACHED = "sglang:cached_tokens_total"
VERIFY = "sglang:spec_verify_calls_total"
REQUESTS = "sglang:num_requests_total"  # counted when a request finishes; one whose client left is not
COUNTERS = (PROMPT, GENERATED, CACHED, VERIFY, REQUESTS)
RUNNING = "sglang:num_running_reqs"
QUEUED = "sglang:num_queue_reqs"
GAUGES = (RUNNING, QUEUED)


@dataclass
class CounterSnapshot:
    """The counters (and load gauges) at one instant (time.monotonic()); `counters` is None when
    /metrics could not be read, and `why` says why."""

    at: float
    counters: dict[str, float] | None
    why: str | None = None
    gauges: dict[str, float] | None = None


@dataclass
class Window:
    seconds: float
    deltas: dict[str, float] = field(default_factory=dict)
    why: str | None = None  # why there are no figures

    @property
    def measured(self) -> bool:
        return self.why is None

    def delta(self, name: str) -> float | None:
        """One counter's difference over the window; None when not measured (or the server has no such counter)."""
        return self.deltas.get(name) if self.measured else None

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
        return {
            "seconds": round(self.seconds, 3),
            "deltas": self.deltas,
            "why": self.why,
            "cached_share": self.cached_share,
            "spec_accept_length": self.spec_accept_length,
            "output_tps": self.output_tps,
        }


def combine(windows: list[Window]) -> Window | None:
    """Several windows as one (their deltas and seconds added), e.g. every phase that must find a
    cold cache; not measured when any of them was not. None for no window at all."""
    if not windows:
        return None
    unmeasured = next((w for w in windows if not w.measured), None)
    seconds = sum(w.seconds for w in windows)
    if unmeasured is not None:
        return Window(seconds, why=unmeasured.why)
    deltas: dict[str, float] = {}
    for w in windows:
        for name, value in w.deltas.items():
            deltas[name] = deltas.get(name, 0.0) + value
    return Window(seconds, deltas)


def counters_from(metrics: dict[str, float] | None) -> dict[str, float] | None:
    """The counters this module uses, from a parsed /metrics (bench.server.parse_prometheus)."""
    if metrics is None:
        return None
    return {name: metrics[name] for name in COUNTERS if name in metrics}


async def snapshot(client: Any, timeout: float = 10.0) -> CounterSnapshot:
    """Read /metrics once through an EndpointClient."""
    from .facts import parse_prometheus

    at = time.monotonic()
    try:
        response = await client.get("/metrics", timeout=timeout)
    except Exception as exc:
        return CounterSnapshot(at, None, f"/metrics unreadable: {type(exc).__name__}: {exc}")
    if response.status_code != 200:
        return CounterSnapshot(
            at,
            None,
            f"/metrics answered HTTP {response.status_code} (SGLang serves it only with --enable-metrics)",
        )
    metrics = parse_prometheus(response.text)
    return CounterSnapshot(at, counters_from(metrics), gauges={n: metrics[n] for n in GAUGES if n in metrics})


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
                return Window(
                    seconds,
                    why=f"{name} went down ({before.counters.get(name)} -> "
                    f"{after.counters[name]}): the server restarted during the window",
                )
            deltas[name] = delta
    return Window(seconds, deltas)


@dataclass
class IdleWait:
    idle: bool | None  # None: the server has no readable /metrics, so idleness was not measured
    waited_s: float
    running: float | None
    queued: float | None
    timeout_s: float
    why: str | None = None  # why idleness was not measured

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(self).items()}


async def wait_idle(client: Any, timeout_s: float, poll_s: float = 0.1) -> IdleWait:
    """Poll /metrics until the server reports no running and no queued request, at most timeout_s.
    Without /metrics (SGLang serves it only with --enable-metrics) this returns at once, idle None."""
    started = time.monotonic()
    while True:
        snap = await snapshot(client, timeout=5.0)
        waited = time.monotonic() - started
        gauges = snap.gauges or {}
        if snap.counters is None or RUNNING not in gauges:
            return IdleWait(None, waited, None, None, timeout_s, why=snap.why or f"/metrics has no {RUNNING}")
        running, queued = gauges.get(RUNNING, 0.0), gauges.get(QUEUED, 0.0)
        if running == 0 and queued == 0:
            return IdleWait(True, waited, running, queued, timeout_s)
        if waited >= timeout_s:
            return IdleWait(False, waited, running, queued, timeout_s)
        await asyncio.sleep(poll_s)
