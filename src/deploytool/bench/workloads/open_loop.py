"""open-loop: Poisson arrivals at a request rate, and a sweep of rates.

Closed-loop runs (a fixed number in flight) slow their own arrivals when the server slows, and
so hide queueing; here request i is sent at its scheduled instant whatever the server is doing
(exponential gaps at `rate` requests/s, seeded). Per rate: goodput, the share of requests that
met both SLOs (TTFT <= slo_ttft_s and the request's own inter-token latency p99 <=
slo_itl_p99_s), output tok/s, TTFT, ITL p99 and TPOT.
"""

from __future__ import annotations

import random

from pydantic import BaseModel, ConfigDict, Field

from .. import stats
from ..context import BenchContext
from ..figures import figure
from ..results import Figure, GroupSummary, RequestRecord
from ..spec import Job, Spec

name = "open-loop"
summary = "Poisson arrivals at each request rate of a sweep; goodput under TTFT and ITL p99 SLOs"


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rates: list[float] = Field(default_factory=lambda: [0.5, 1.0, 2.0, 4.0, 8.0], description="requests/s")
    requests_per_rate: int = Field(default=64, ge=1)
    prompt_tokens: int = Field(default=1_000, ge=16)
    output_tokens: int = Field(default=256, ge=2)
    slo_ttft_s: float = Field(default=2.0, gt=0)
    slo_itl_p99_s: float = Field(default=0.1, gt=0)


QUICK = {
    "rates": [4.0, 16.0],
    "requests_per_rate": 16,
    "prompt_tokens": 128,
    "output_tokens": 32,
    "slo_ttft_s": 0.5,
}


def rate_name(rate: float) -> str:
    return f"poisson_r{rate:g}"


async def run(ctx: BenchContext) -> None:
    s: Settings = ctx.settings
    for rate in s.rates:
        group = rate_name(rate)
        rng = random.Random(f"{ctx.seed}:{ctx.repeat}:{rate}")  # the arrival process, recorded via the seed
        schedule, t = [], 0.0
        for _ in range(s.requests_per_rate):
            schedule.append(t)
            t += rng.expovariate(rate)
        concurrency = max(1, round(rate))  # a label only: open loop has no bound on requests in flight

        def jobs(g: str = group, sch: list[float] = schedule) -> list[Job]:
            return [
                ctx.job(Spec("open-loop", g, 0, i, s.prompt_tokens, s.output_tokens, scheduled=round(o, 6)))
                for i, o in enumerate(sch)
            ]

        await ctx.measure(group, "open-loop", concurrency, jobs, schedule=schedule)


def meets_slos(rec: RequestRecord, slo_ttft_s: float, slo_itl_p99_s: float) -> bool:
    ttft = stats.ttft(rec)
    itl99 = stats.percentile(stats.itls(rec), 99)
    return rec.ok and ttft is not None and ttft <= slo_ttft_s and (itl99 is None or itl99 <= slo_itl_p99_s)


def figures(
    ctx: BenchContext, groups: list[GroupSummary], records: dict[str, list[RequestRecord]]
) -> list[Figure]:
    s: Settings = ctx.settings
    out: list[Figure] = []
    for g in groups:
        if g.phase != "open-loop":
            continue
        recs = records.get(g.name, [])
        done = [r for r in recs if r.ok]
        rate = g.name.split("_r", 1)[1]
        good = sum(1 for r in recs if meets_slos(r, s.slo_ttft_s, s.slo_itl_p99_s))
        label = f"open loop, {rate} req/s"
        out.append(
            figure(
                f"{g.name}_goodput",
                f"{label}: goodput (share within SLOs)",
                "",
                "higher",
                g,
                value=good / len(recs) if recs else None,
            )
        )
        out.append(
            figure(
                f"{g.name}_output_tps",
                f"{label}: output tok/s",
                "tok/s",
                "higher",
                g,
                value=g.aggregate_output_tps,
            )
        )
        out.append(
            figure(f"{g.name}_ttft_s", f"{label}: TTFT", "s", "lower", g, [stats.ttft(r) for r in done])
        )
        out.append(
            figure(
                f"{g.name}_itl_p99_s", f"{label}: inter-token latency p99", "s", "lower", g, value=g.itl_p99_s
            )
        )
        out.append(
            figure(
                f"{g.name}_tpot_s",
                f"{label}: time per output token",
                "s",
                "lower",
                g,
                [stats.tpot(r) for r in done],
            )
        )
        span = (max(r.start for r in recs) - min(r.start for r in recs)) if len(recs) > 1 else None
        ctx.details.setdefault("open_loop_achieved_rate", {}).setdefault(g.name, []).append(
            round((len(recs) - 1) / span, 4) if span else None
        )
    return out
