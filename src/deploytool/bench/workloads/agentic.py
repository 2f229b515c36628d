"""agentic: multi-turn agentic replay, the GLM-5.2 post's method (figure 7).

Each conversation opens with a ~80K-token prompt and runs 13 turns of ~220 output tokens; every
turn resends the whole conversation so far (its earlier prompts and the answers the server gave)
plus a new user message (the tool output an agent would add). Prefix reuse is the point: the
cold-cache rule holds for each conversation's first turn only, and later turns are expected to
hit the server's prefix cache (the post reports ~92% aggregate hit rate).

A concurrency sweep runs `c` conversations at once for each level. Per level: the cache-hit
share from the server's counters (sglang:cached_tokens_total / sglang:prompt_tokens_total over
the phase), TTFT per turn, tok/s per user (median per-request decode speed) and tok/s per GPU
(aggregate output tok/s over the GPUs). The levels form one Pareto curve (tok/s/GPU against
tok/s/user) per run, so two releases' curves overlay in `compare`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from .. import stats
from ..context import BenchContext
from ..figures import figure
from ..results import Figure, GroupSummary, RequestRecord
from ..spec import Job, Spec

name = "agentic"
summary = (
    "multi-turn replay (~80K first prompt, 13 turns x ~220 tokens, conversation resent), concurrency sweep"
)


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    first_prompt_tokens: int = Field(default=80_000, ge=16)
    turn_user_tokens: int = Field(default=400, ge=1, description="new user/tool text added each turn")
    output_tokens_per_turn: int = Field(default=220, ge=2)
    turns: int = Field(default=13, ge=1)
    concurrency: list[int] = Field(default_factory=lambda: [1, 2, 4, 8, 16])
    conversations_per_slot: int = Field(default=1, ge=1)


QUICK = {
    "first_prompt_tokens": 2_000,
    "turn_user_tokens": 64,
    "output_tokens_per_turn": 32,
    "turns": 4,
    "concurrency": [1, 2, 4],
}


async def run(ctx: BenchContext) -> None:
    s: Settings = ctx.settings
    growth = s.turns * (s.output_tokens_per_turn + s.turn_user_tokens + 16)
    first = ctx.cap_sizes([s.first_prompt_tokens], growth, "agentic first prompt")[0]
    top = ctx.facts.max_running_requests
    for c in s.concurrency:
        if top is not None and c > top:
            ctx.notes.append(f"agentic: concurrency {c} is above the server's max running requests ({top})")
        group = f"agentic_c{c}"

        def jobs(g: str = group, c: int = c) -> list[Job]:
            return [_conversation(ctx, g, c, k, first) for k in range(c * s.conversations_per_slot)]

        await ctx.measure(group, "agentic", c, jobs)


def _conversation(ctx: BenchContext, group: str, c: int, k: int, first_tokens: int) -> Job:
    s: Settings = ctx.settings

    async def run() -> None:
        opening = ctx.prompts.make(first_tokens, group)
        messages = [{"role": "user", "content": opening.text}]
        for t in range(s.turns):
            if ctx.out_of_time(group):
                return
            spec = Spec(
                "agentic",
                group,
                c,
                k * s.turns + t,
                first_tokens,
                s.output_tokens_per_turn,
                conversation=k,
                turn=t,
            )
            record, result = await ctx.send(spec, messages, prefix=opening.prefix)
            if not record.ok:
                return  # a conversation whose turn failed cannot go on: its later turns are not sent
            observation = ctx.prompts.make(s.turn_user_tokens, f"{group} tool output").text
            messages = [
                *messages,
                {"role": "assistant", "content": result.content},
                {"role": "user", "content": observation},
            ]

    return run


def figures(
    ctx: BenchContext, groups: list[GroupSummary], records: dict[str, list[RequestRecord]]
) -> list[Figure]:
    out: list[Figure] = []
    by_turn = ctx.details.setdefault("agentic_ttft_by_turn_s", {})
    for g in groups:
        if g.phase != "agentic":
            continue
        c = g.concurrency
        done = [r for r in records.get(g.name, []) if r.ok]
        later = [r for r in done if r.turn]
        out.append(
            figure(
                f"agentic_c{c}_per_user_tps",
                f"agentic, {c} conversations: tok/s per user",
                "tok/s",
                "higher",
                g,
                [stats.decode_tps(r) for r in done],
            )
        )
        per_gpu = None if g.aggregate_output_tps is None else g.aggregate_output_tps / ctx.gpus
        out.append(
            figure(
                f"agentic_c{c}_per_gpu_tps",
                f"agentic, {c} conversations: tok/s per GPU",
                "tok/s",
                "higher",
                g,
                value=per_gpu,
            )
        )
        out.append(
            figure(
                f"agentic_c{c}_first_turn_ttft_s",
                f"agentic, {c} conversations: TTFT, first turn",
                "s",
                "lower",
                g,
                [stats.ttft(r) for r in done if r.turn == 0],
            )
        )
        out.append(
            figure(
                f"agentic_c{c}_later_turns_ttft_s",
                f"agentic, {c} conversations: TTFT, later turns",
                "s",
                "lower",
                g,
                [stats.ttft(r) for r in later],
            )
        )
        share = g.server_cached_share
        label = "cache-hit share (server counters)"
        if share is None:  # no /metrics: the responses' own usage.prompt_tokens_details
            prompt = sum(r.prompt_tokens or 0 for r in done)
            share = sum(r.cached_tokens or 0 for r in done) / prompt if prompt else None
            label = "cache-hit share (responses' usage)"
        out.append(
            figure(
                f"agentic_c{c}_cache_hit_share",
                f"agentic, {c} conversations: {label}",
                "",
                "neither",
                g,
                value=share,
            )
        )
        turns = max((r.turn or 0 for r in done), default=-1) + 1
        by_turn.setdefault(g.name, []).append(
            [stats.median(stats.ttft(r) for r in done if r.turn == t) for t in range(turns)]
        )
    return out
