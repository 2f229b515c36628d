"""long-context: per-request decode tok/s after prompts of 30K, 120K and 225K tokens.

The source's table reports 381 / 297 / 256 tok/s for these on an RTX 5090 (Elsa, thinking off):
decode slows as the context it attends over grows. Each prompt is unique (no prefix cache can
help), one request at a time; the figure is the median per-request decode speed, TTFT beside it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from .. import stats
from ..context import BenchContext
from ..figures import figure
from ..results import Figure, GroupSummary, RequestRecord
from ..spec import Job, Spec

name = "long-context"
summary = "decode tok/s of one request after 30K / 120K / 225K-token prompts"


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    context_tokens: list[int] = Field(default_factory=lambda: [30_000, 120_000, 225_000])
    requests_each: int = Field(default=3, ge=1, description="distinct prompts per context length")
    output_tokens: int = Field(default=1000, ge=2)


QUICK = {"context_tokens": [1_000, 8_000], "requests_each": 2, "output_tokens": 64}


async def run(ctx: BenchContext) -> None:
    await run_lengths(
        ctx, "longctx", ctx.settings.context_tokens, ctx.settings.requests_each, ctx.settings.output_tokens
    )


async def run_lengths(ctx: BenchContext, phase: str, sizes: list[int], each: int, output: int) -> None:
    for size in ctx.cap_sizes(sizes, output, phase):
        group = f"{phase}_{size}"

        def jobs(g: str = group, n: int = size) -> list[Job]:
            return [ctx.job(Spec(phase, g, 1, i, n, output)) for i in range(each)]

        await ctx.measure(group, phase, 1, jobs)


def length_figures(
    groups: list[GroupSummary], records: dict[str, list[RequestRecord]], phase: str, label: str
) -> list[Figure]:
    out = []
    for g in groups:
        if g.phase != phase:
            continue
        size = int(g.name.rsplit("_", 1)[1])
        done = [r for r in records.get(g.name, []) if r.ok]
        out.append(
            figure(
                f"{g.name}_decode_tps",
                f"{label}, {size:,}-token prompt",
                "tok/s",
                "higher",
                g,
                [stats.decode_tps(r) for r in done],
            )
        )
        out.append(
            figure(
                f"{g.name}_ttft_s",
                f"time to first token, {size:,}-token prompt ({phase})",
                "s",
                "lower",
                g,
                [stats.ttft(r) for r in done],
            )
        )
    return out


def figures(
    ctx: BenchContext, groups: list[GroupSummary], records: dict[str, list[RequestRecord]]
) -> list[Figure]:
    return length_figures(groups, records, "longctx", "decode after a long prompt")
