"""table: the source's table (docs/bench.md, "The method").

Decode at concurrency 1 (8 requests x ~1,000 tokens, per-request median), aggregates at
concurrency 4 and 8 (16 and 32 requests), prefill at 30K / 120K / 225K (three distinct prompts
each, median), thinking off at temperature 0 or on at 0.7 (`--thinking`), and the optional
concurrency sweep. Its sizes are BenchMethod's own fields (decode_requests, load_concurrency,
prefill_prompt_tokens, ...), as they were before workloads had names.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from .. import stats
from ..context import BenchContext
from ..figures import figure
from ..results import Figure, GroupSummary, RequestRecord
from ..spec import Job, Spec

name = "table"
summary = "the source's table: decode c=1, aggregates at c=4/8, prefill 30K/120K/225K (and --sweep)"
_SWEEP_CAP_WHEN_UNKNOWN = 64


class Settings(BaseModel):
    """No settings of its own: the table's sizes are BenchMethod fields."""

    model_config = ConfigDict(extra="forbid")


QUICK: dict = {}


async def run(ctx: BenchContext) -> None:
    m = ctx.method

    def specs_job(phase: str, group: str, c: int, n: int, prompt: int, out: int) -> Callable[[], list[Job]]:
        return lambda: [ctx.job(Spec(phase, group, c, i, prompt, out)) for i in range(n)]

    await ctx.measure(
        "decode_c1",
        "decode",
        1,
        specs_job(
            "decode", "decode_c1", 1, m.decode_requests, m.decode_prompt_tokens, m.decode_output_tokens
        ),
    )
    for c in m.load_concurrency:
        await ctx.measure(
            f"load_c{c}",
            "load",
            c,
            specs_job(
                "load",
                f"load_c{c}",
                c,
                c * m.load_requests_per_slot,
                m.decode_prompt_tokens,
                m.load_output_tokens,
            ),
        )
    for size in ctx.cap_sizes(m.prefill_prompt_tokens, m.prefill_output_tokens, "prefill"):
        await ctx.measure(
            f"prefill_{size}",
            "prefill",
            1,
            specs_job("prefill", f"prefill_{size}", 1, m.prefill_prompts_each, size, m.prefill_output_tokens),
        )
    if m.sweep:
        for c in sweep_levels(ctx):
            await ctx.measure(
                f"sweep_c{c}",
                "sweep",
                c,
                specs_job(
                    "sweep",
                    f"sweep_c{c}",
                    c,
                    c * m.sweep_requests_per_slot,
                    m.decode_prompt_tokens,
                    m.sweep_output_tokens,
                ),
            )


def sweep_levels(ctx: BenchContext) -> list[int]:
    top = ctx.facts.max_running_requests
    if top is None:
        top = _SWEEP_CAP_WHEN_UNKNOWN
        note = f"the server reported no max running requests: the sweep stops at {top}"
        if note not in ctx.notes:
            ctx.notes.append(note)
    top = min(top, ctx.method.sweep_max_concurrency)
    levels, c = [], 1
    while c < top:
        levels.append(c)
        c *= 2
    levels.append(top)
    return levels


def figures(
    ctx: BenchContext, groups: list[GroupSummary], records: dict[str, list[RequestRecord]]
) -> list[Figure]:
    out: list[Figure] = []
    for g in groups:
        done = [r for r in records.get(g.name, []) if r.ok]
        decode = [stats.decode_tps(r) for r in done]
        ttfts = [stats.ttft(r) for r in done]
        if g.phase == "decode":
            out.append(figure("decode_c1_tps", "decode, 1 request", "tok/s", "higher", g, decode))
            out.append(figure("ttft_c1_s", "time to first token, 1 request", "s", "lower", g, ttfts))
            out.append(
                figure(
                    "ttfa_c1_s",
                    "time to first answer token, 1 request",
                    "s",
                    "lower",
                    g,
                    [stats.ttfa(r) for r in done],
                )
            )
        elif g.phase == "load":
            c = g.concurrency
            out.append(
                figure(
                    f"load_c{c}_aggregate_tps",
                    f"decode, {c} concurrent, total",
                    "tok/s",
                    "higher",
                    g,
                    value=g.aggregate_output_tps,
                )
            )
            out.append(
                figure(
                    f"load_c{c}_per_request_tps",
                    f"decode, {c} concurrent, per request",
                    "tok/s",
                    "higher",
                    g,
                    decode,
                )
            )
            out.append(
                figure(f"load_c{c}_ttft_s", f"time to first token, {c} concurrent", "s", "lower", g, ttfts)
            )
        elif g.phase == "prefill":
            size = g.name.split("_", 1)[1]
            out.append(
                figure(
                    f"prefill_{size}_tps",
                    f"prefill, {int(size):,} tokens",
                    "tok/s",
                    "higher",
                    g,
                    [stats.prefill_tps(r) for r in done],
                )
            )
            out.append(
                figure(
                    f"prefill_{size}_ttft_s",
                    f"time to first token, {int(size):,}-token prompt",
                    "s",
                    "lower",
                    g,
                    ttfts,
                )
            )
    return out
