"""The figures `top` shows and `monitor` records, from two scrapes of SGLang's /metrics.

One list (FIGURES) names each figure, its unit, how it reads against a gate, and its PromQL over
a window; `top` computes the same figures from two scrapes it took itself (figures()), the
monitor's recording rules and the Grafana dashboard are written from the PromQL.

Names are SGLang's (sglang/srt/observability/metrics_collector.py, 0.5.23; the same names in
the real 0.5.17 server's /metrics, tests/data/sglang-real/):

  requests/s        Δ sglang:num_requests_total / s     (counted when a request finishes)
  input, output     Δ sglang:prompt_tokens_total, Δ sglang:generation_tokens_total / s
  TTFT p50/p99      sglang:time_to_first_token_seconds bucket deltas (labels summed)
  TPOT p50/p99      sglang:request_time_per_output_token_seconds (per request, 0.5.23), else
                    sglang:inter_token_latency_seconds (per token; all 0.5.17 has)
  running, queued   sglang:num_running_reqs, sglang:num_queue_reqs (summed over ranks)
  KV pool use       sglang:token_usage (max over ranks)
  prefix hit rate   Δ sglang:cached_tokens_total / Δ sglang:prompt_tokens_total
  accept length     Δ sglang:generation_tokens_total / Δ sglang:spec_verify_calls_total

The gauges sglang:cache_hit_rate and sglang:spec_accept_length describe SGLang's own last
logging window, and a histogram's mean hides its tail, so neither is used: quantiles come from
the bucket counts gained over the window, the way Prometheus's histogram_quantile reads them.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from ..server import metrics_window as mw
from ..server.facts import parse_series

TTFT = "sglang:time_to_first_token_seconds"
TPOT = "sglang:request_time_per_output_token_seconds"
ITL = "sglang:inter_token_latency_seconds"
KV_USE = "sglang:token_usage"
BY = "slot, release, profile, card"  # the labels the monitor puts on every scraped series


@dataclass(frozen=True)
class Figure:
    key: str
    title: str
    unit: str  # "1/s", "tok/s", "s", "", "ratio"
    promql: str  # over the range `$w` (a rate window) and the series' labels kept by `by`
    worse: str  # "higher" or "lower": which way a figure moves when a gate is broken


def _rate(name: str) -> str:
    return f"sum by ({BY}) (rate({name}[$w]))"


def _quantile(q: float, name: str) -> str:
    return f"histogram_quantile({q}, sum by ({BY}, le) (rate({name}_bucket[$w])))"


FIGURES: tuple[Figure, ...] = (
    Figure("requests_per_s", "requests/s", "1/s", _rate(mw.REQUESTS), "lower"),
    Figure("input_tps", "input tok/s", "tok/s", _rate(mw.PROMPT), "lower"),
    Figure("output_tps", "output tok/s", "tok/s", _rate(mw.GENERATED), "lower"),
    Figure("ttft_p50_s", "TTFT p50", "s", _quantile(0.5, TTFT), "higher"),
    Figure("ttft_p99_s", "TTFT p99", "s", _quantile(0.99, TTFT), "higher"),
    # 0.5.23's per-request TPOT where the server has it, else 0.5.17's per-token latency.
    Figure("tpot_p50_s", "TPOT p50", "s", f"({_quantile(0.5, TPOT)}) or ({_quantile(0.5, ITL)})", "higher"),
    Figure("tpot_p99_s", "TPOT p99", "s", f"({_quantile(0.99, TPOT)}) or ({_quantile(0.99, ITL)})", "higher"),
    Figure("running", "running", "", f"sum by ({BY}) ({mw.RUNNING})", "higher"),
    Figure("queued", "queued", "", f"sum by ({BY}) ({mw.QUEUED})", "higher"),
    Figure("kv_use", "KV pool use", "ratio", f"max by ({BY}) ({KV_USE})", "higher"),
    Figure(
        "prefix_hit_rate",
        "prefix hit rate",
        "ratio",
        f"({_rate(mw.CACHED)} or {_rate(mw.PROMPT)} * 0) / {_rate(mw.PROMPT)}",
        "lower",
    ),
    Figure("spec_accept_length", "accept length", "", f"{_rate(mw.GENERATED)} / {_rate(mw.VERIFY)}", "lower"),
)
KEYS = tuple(f.key for f in FIGURES)


@dataclass
class Scrape:
    """One read of /metrics: every sample with its labels, at time.monotonic(); `series` None
    when it could not be read, and `why` says why."""

    at: float
    series: list[tuple[str, dict[str, str], float]] | None
    why: str | None = None

    @classmethod
    def of_text(cls, text: str, at: float | None = None) -> Scrape:
        return cls(time.monotonic() if at is None else at, parse_series(text))

    def snapshot(self) -> mw.CounterSnapshot:
        """The same read as metrics_window's snapshot, so its window arithmetic applies."""
        if self.series is None:
            return mw.CounterSnapshot(self.at, None, self.why)
        summed: dict[str, float] = {}
        for name, _labels, value in self.series:
            if name in mw.COUNTERS:
                summed[name] = summed.get(name, 0.0) + value
        return mw.CounterSnapshot(self.at, summed)

    def gauge(self, name: str, how: str = "sum") -> float | None:
        values = [v for n, _l, v in self.series or () if n == name]
        if not values:
            return None
        return max(values) if how == "max" else sum(values)

    def buckets(self, name: str) -> dict[float, float]:
        """A histogram's cumulative bucket counts by upper bound, its label sets summed."""
        out: dict[float, float] = {}
        for n, labels, value in self.series or ():
            if n == f"{name}_bucket" and "le" in labels:
                try:
                    bound = float(labels["le"])  # "+Inf" reads as inf
                except ValueError:
                    continue
                out[bound] = out.get(bound, 0.0) + value
        return out


@dataclass
class Figures:
    seconds: float
    values: dict[str, float | None] = field(default_factory=dict)
    why: str | None = None  # why the window's rates are missing (a scrape failed, a restart)

    def get(self, key: str) -> float | None:
        return self.values.get(key)

    def to_json(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 3),
            "why": self.why,
            **{k: (None if v is None else round(v, 6)) for k, v in self.values.items()},
        }


def figures(before: Scrape, after: Scrape) -> Figures:
    """Every figure of FIGURES over the window between two scrapes. The gauges (running, queued,
    KV use) are the later scrape's and survive a window that cannot be measured; the rates and
    quantiles are None when either scrape failed or a counter went down (the server restarted)."""
    seconds = max(0.0, after.at - before.at)
    values: dict[str, float | None] = dict.fromkeys(KEYS)
    if after.series is None:
        return Figures(seconds, values, why=after.why or "/metrics unreadable")
    values["running"] = after.gauge(mw.RUNNING)
    values["queued"] = after.gauge(mw.QUEUED)
    values["kv_use"] = after.gauge(KV_USE, how="max")
    window = mw.window(before.snapshot(), after.snapshot())
    if not window.measured:
        return Figures(seconds, values, why=window.why)
    if seconds <= 0:
        return Figures(seconds, values, why="the two scrapes are at the same instant")
    for key, name in (
        ("requests_per_s", mw.REQUESTS),
        ("input_tps", mw.PROMPT),
        ("output_tps", mw.GENERATED),
    ):
        delta = window.delta(name)
        values[key] = delta / seconds if delta is not None else None
    values["prefix_hit_rate"] = window.cached_share
    values["spec_accept_length"] = window.spec_accept_length
    for prefix, names in (("ttft", (TTFT,)), ("tpot", (TPOT, ITL))):
        deltas = next((d for d in (bucket_deltas(before, after, n) for n in names) if d), None)
        for q, suffix in ((0.5, "p50"), (0.99, "p99")):
            values[f"{prefix}_{suffix}_s"] = quantile(q, deltas) if deltas else None
    return Figures(seconds, values)


def bucket_deltas(before: Scrape, after: Scrape, name: str) -> dict[float, float] | None:
    """The bucket counts a histogram gained over the window; None when it has none in the later
    scrape, or when a bucket went down (a restart: the window says nothing)."""
    now = after.buckets(name)
    if not now:
        return None
    then = before.buckets(name)
    deltas = {}
    for bound, count in now.items():
        delta = count - then.get(bound, 0.0)
        if delta < 0:
            return None
        deltas[bound] = delta
    return deltas


def quantile(q: float, cumulative: dict[float, float]) -> float | None:
    """Prometheus's histogram_quantile over cumulative bucket counts: the bucket the rank falls
    in, and a linear place inside it (from 0 for the first bucket). The rank in the +Inf bucket
    answers the highest finite bound. None when no observation fell in the window."""
    bounds = sorted(cumulative)
    if not bounds or not math.isinf(bounds[-1]):
        return None
    total = cumulative[bounds[-1]]
    if total <= 0:
        return None
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound in bounds:
        count = cumulative[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower_bound if len(bounds) > 1 else None
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return None
