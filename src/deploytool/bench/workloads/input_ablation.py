"""input-ablation: interactivity (decode tok/s of one user, concurrency 1) as the input grows,
from 1K tokens to the context limit: the GLM-5.2 post's figure 8 ("ISL ablation").

A flat line means the runtime's per-token cost does not grow with the context (TopK-V2 there);
a falling one shows what long inputs cost each user. Sizes past the context are capped to it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ..context import BenchContext
from ..results import Figure, GroupSummary, RequestRecord
from .long_context import length_figures, run_lengths

name = "input-ablation"
summary = "tok/s per user at concurrency 1 as the input grows from 1K tokens to the context limit"


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input_tokens: list[int] = Field(
        default_factory=lambda: [1_000, 4_000, 16_000, 64_000, 128_000, 256_000, 1_000_000]
    )
    requests_each: int = Field(default=2, ge=1)
    output_tokens: int = Field(default=256, ge=2)


QUICK = {"input_tokens": [500, 2_000, 8_000], "requests_each": 2, "output_tokens": 64}


async def run(ctx: BenchContext) -> None:
    await run_lengths(
        ctx, "ablation", ctx.settings.input_tokens, ctx.settings.requests_each, ctx.settings.output_tokens
    )


def figures(
    ctx: BenchContext, groups: list[GroupSummary], records: dict[str, list[RequestRecord]]
) -> list[Figure]:
    return length_figures(groups, records, "ablation", "interactivity (tok/s per user)")
