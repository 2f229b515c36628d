"""needle: RULER's needle-in-a-haystack grid (qualify/ruler.py) on generated prose
(qualify/prose.py): variants single (number and UUID values), multikey with distractors,
multivalue and multiquery, at every length of a grid from 8K up to the target (225K by default,
capped by the context length) and at least five depths, scored with RULER's string_match_all.

Each length is found by search against the server's own `usage.prompt_tokens`
(qualify/suites/needle/haystack.py), with the longest variant's prompt, so no variant runs over. Every prompt
opens with a fresh random line, so a prefix cache cannot serve one prompt from another.
Gate: per length, the mean string_match_all >= min_accuracy (or min_accuracy_by_length).
The report holds a depth x length heat map of the scores.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import statistics
from typing import Any

from pydantic import Field

from ....server.facts import ServerFacts
from ...context import SuiteContext, chat_payload
from ...prose import sentences as prose_sentences
from ...ruler import VARIANTS, Variant, build, string_match_all
from ...suite_api import Gate, SuiteResult, SuiteSettings, Verdict, response_problems
from ...transcripts import TranscriptLog, transcript
from .haystack import search_length

name = "needle"
TOKENS_PER_SENTENCE_GUESS = 16  # only the search's first guess; the server's count decides
SEARCH_VARIANT: Variant = "multiquery"  # the longest prompt for a given haystack: every other variant fits


class Settings(SuiteSettings):
    target_tokens: int = Field(default=225_000, ge=256, description="Longest prompt (capped by context).")
    lengths: list[int] = Field(default=[8192, 32768, 131072], description="Shorter lengths of the grid.")
    depths: list[float] = Field(default=[0.1, 0.3, 0.5, 0.7, 0.9], min_length=1)
    variants: list[Variant] = Field(default=list(VARIANTS), min_length=1)
    samples: int = Field(default=1, ge=1, description="Samples per variant, length and depth.")
    min_accuracy: float = Field(default=0.9, ge=0, le=1, description="Gate per length (string_match_all).")
    min_accuracy_by_length: dict[int, float] = Field(
        default_factory=dict, description="Per-length overrides."
    )
    max_tokens: int = Field(default=128, ge=8, description="RULER's tokens_to_generate for niah.")
    concurrency: int = Field(default=2, ge=1)
    tolerance: float = Field(
        default=0.01, gt=0, lt=0.5, description="Accepted shortfall, fraction of a length."
    )
    max_probes: int = Field(default=8, ge=1, description="Length-search requests per length at most.")
    request_timeout_s: float = 900.0


def applies_to(profile: Any, server: ServerFacts) -> str | None:
    return None


def fresh_opening() -> str:
    """A random first line, new for every request: a prefix (radix) cache then finds nothing to
    reuse between prompts whose prose is otherwise the same."""
    return f"{secrets.token_hex(8)}\n"


class Haystack:
    """Prose sentences from one seed, grown on demand (the same text for every length)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._sentences: list[str] = []

    def take(self, n: int) -> list[str]:
        if n > len(self._sentences):
            self._sentences = prose_sentences(max(n, 2 * len(self._sentences)), self.seed)
        return self._sentences[:n]


def grid_lengths(s: Settings, context: int | None) -> tuple[list[int], int, bool]:
    cap, capped = s.target_tokens, False
    if context is not None and cap > context - s.max_tokens - 64:
        # room for the answer and the chat template's closing tokens
        cap, capped = context - s.max_tokens - 64, True
    return sorted({n for n in s.lengths if n < cap} | {cap}), cap, capped


def grid_cells(s: Settings, lengths: list[int]) -> list[tuple[int, float, Variant]]:
    """(length, depth, variant) cells, ordered so that any prefix spreads over the grid (what
    --limit N keeps): every length in turn, and depth and variant both rotating, so the first
    len(depths) x len(lengths) cells already hold every depth and every variant."""
    nd, nv = len(s.depths), len(s.variants)
    width = max(nd, nv)
    order = sorted(
        ((i, j) for i in range(nd) for j in range(nv)), key=lambda p: ((p[1] - p[0]) % width, p[0])
    )
    pairs = [(s.depths[i], s.variants[j]) for i, j in order]
    return [(n, d, v) for _ in range(s.samples) for d, v in pairs for n in lengths]


async def run(ctx: SuiteContext[Settings]) -> SuiteResult:
    s = ctx.settings
    rng = random.SystemRandom()
    haystack = Haystack(rng.randrange(2**32))
    grid, target, capped = grid_lengths(s, ctx.context_length)
    cells, limited = ctx.apply_limit(grid_cells(s, grid))
    # --limit N keeps the first N cells, which may not reach every length: only the lengths a kept
    # cell asks at are searched and judged (a length with no sample has no accuracy to gate on)
    lengths = [n for n in grid if any(c[0] == n for c in cells)]
    ctx.set_total(len(cells) + len(lengths))
    result = SuiteResult(name=name, verdict=Verdict.ERROR, limited=limited)
    log = TranscriptLog()
    sizes, probe_errors = await _find_lengths(ctx, haystack, lengths, log)
    result.figures = {
        "target_tokens": target,
        "requested_tokens": s.target_tokens,
        "capped_by_context": capped,
        "context_length": ctx.context_length,
        "lengths": list(sizes.values()),
    }
    missing = [n for n in lengths if not sizes[n]["found"]]
    for n in missing:
        last = f"; last error: {probe_errors[-1]}" if probe_errors else ""
        result.gates.append(
            Gate(
                name=f"haystack reaches {n} tokens",
                threshold=f"{n - max(16, int(n * s.tolerance))}..{n}",
                measured=sizes[n]["prompt_tokens"],
                passed=False,
                comparison="in",
                detail=f"length search ended after {sizes[n]['probes']} probes{last}",
            )
        )
    runnable = [c for c in cells if c[0] not in missing]
    rows = await asyncio.gather(*(_ask(ctx, haystack, sizes, rng, log, *c) for c in runnable))
    by_length = _by_length(rows, lengths, missing)
    for length in lengths:
        if length in missing:
            continue
        need = s.min_accuracy_by_length.get(length, s.min_accuracy)
        stats = by_length[length]
        worst = ", ".join(f"{v} {a:.2f}" for v, a in stats["by_variant"].items() if a < 1)
        result.gates.append(
            Gate.at_least(
                f"string_match_all at {length} tokens",
                stats["accuracy"],
                need,
                detail=f"n={stats['samples']}" + (f"; below 1: {worst}" if worst else ""),
            )
        )
    result.figures.update(
        {
            "by_length": [by_length[n] for n in lengths if n not in missing],
            "by_variant": {v: _mean([r["score"] for r in rows if r["variant"] == v]) for v in s.variants},
            "heatmap": _heatmap(rows, s.depths, [n for n in lengths if n not in missing]),
            "requests": len(rows),
            "errors": sum(1 for r in rows if r["error"]),
        }
    )
    result.method = _method(s, grid, target) + (
        f" --limit {ctx.limit}: {len(cells)} cells, at lengths {lengths}." if limited else ""
    )
    result.transcripts = log.items
    return result.judge()


async def _find_lengths(
    ctx: SuiteContext[Settings], haystack: Haystack, lengths: list[int], log: TranscriptLog
) -> tuple[dict[int, dict[str, Any]], list[str]]:
    """Each length's haystack size, searched against the server's own prompt_tokens: the sizes
    by length, and the failed probes' errors."""
    s = ctx.settings
    probe_errors: list[str] = []

    async def measure(units: int) -> int | None:
        sample = build(SEARCH_VARIANT, haystack.take(units), 0.5, random.Random(units), fresh_opening())
        payload = chat_payload(ctx, [{"role": "user", "content": sample.prompt}], max_tokens=1)
        res = await ctx.client.chat(payload)
        if res.error or res.prompt_tokens is None:
            probe_errors.append(f"{units} sentences: {res.error or 'no usage.prompt_tokens in the response'}")
            log.add(
                transcript(
                    f"length probe {units} sentences", payload, res, passed=False, problems=[probe_errors[-1]]
                )
            )
            return None
        return int(res.prompt_tokens)

    sizes: dict[int, dict[str, Any]] = {}
    for length in lengths:
        tolerance = max(16, int(length * s.tolerance))
        search = await search_length(
            measure,
            length,
            guess=max(1, length // TOKENS_PER_SENTENCE_GUESS),
            tolerance=tolerance,
            max_probes=s.max_probes,
        )
        sizes[length] = {
            "length": length,
            "sentences": search.units,
            "prompt_tokens": search.tokens,
            "found": search.found,
            "probes": len(search.probes),
        }
        ctx.advance()
    return sizes, probe_errors


async def _ask(
    ctx: SuiteContext[Settings],
    haystack: Haystack,
    sizes: dict[int, dict[str, Any]],
    rng: random.Random,
    log: TranscriptLog,
    length: int,
    depth: float,
    variant: Variant,
) -> dict[str, Any]:
    """One cell of the grid: a haystack of that length with the variant's needles at that depth."""
    s = ctx.settings
    sample = build(
        variant,
        haystack.take(sizes[length]["sentences"]),
        depth,
        random.Random(rng.random()),
        fresh_opening(),
    )
    payload = chat_payload(
        ctx,
        [{"role": "user", "content": sample.prompt}],
        stream=True,
        max_tokens=s.max_tokens,
        thinking=False,
    )
    res = await ctx.send(payload)
    ctx.advance()
    score = 0.0 if res.error else string_match_all(res.content, sample.answers)
    problems = response_problems(res)
    if not res.error and score < 1:
        missed = [a for a in sample.answers if a.lower() not in res.content.lower()]
        problems.append(f"the answer lacks {missed}: {res.content[:160]!r}")
    log.add(
        transcript(
            f"{variant} length {length} depth {depth:g}",
            payload,
            res,
            passed=score == 1.0,
            problems=problems,
            expected=sample.answers,
        )
    )
    return {
        "length": length,
        "depth": depth,
        "variant": variant,
        "score": score,
        "prompt_tokens": res.prompt_tokens,
        "ttft_s": res.ttft,
        "cached_tokens": res.cached_tokens,
        "error": res.error,
    }


def _mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


def _by_length(
    rows: list[dict[str, Any]], lengths: list[int], missing: list[int]
) -> dict[int, dict[str, Any]]:
    out = {}
    for n in lengths:
        mine = [r for r in rows if r["length"] == n]
        if n in missing or not mine:
            continue
        ttfts = [r["ttft_s"] for r in mine if r["ttft_s"] is not None]
        cached = [r["cached_tokens"] for r in mine if r["cached_tokens"] is not None]
        out[n] = {
            "length": n,
            "samples": len(mine),
            "accuracy": _mean([r["score"] for r in mine]),
            "by_variant": {
                v: _mean([r["score"] for r in mine if r["variant"] == v])
                for v in dict.fromkeys(r["variant"] for r in mine)
            },
            "prompt_tokens_max": max((r["prompt_tokens"] or 0) for r in mine),
            "ttft_s_median": round(statistics.median(ttfts), 4) if ttfts else None,
            "cached_tokens_max": max(cached) if cached else None,
        }
    return out


def _heatmap(rows: list[dict[str, Any]], depths: list[float], lengths: list[int]) -> dict[str, Any]:
    """Mean string_match_all per depth (rows) and length (columns), for the report's heat map."""
    values = [
        [_mean([r["score"] for r in rows if r["depth"] == d and r["length"] == n]) for n in lengths]
        for d in depths
    ]
    return {
        "title": "string_match_all by depth (rows) and prompt tokens (columns)",
        "rows": [f"depth {d:g}" for d in depths],
        "columns": [str(n) for n in lengths],
        "values": values,
    }


def _method(s: Settings, lengths: list[int], target: int) -> str:
    return (
        f"RULER NIAH variants {s.variants} (NVIDIA/RULER niah templates, 7-digit numbers or UUIDs, "
        f"adjective-noun keys) on generated prose, at lengths {lengths} (largest = {target}, the target capped "
        f"by the context) x depths {s.depths} x {s.samples} sample(s): {len(lengths) * len(s.depths) * len(s.variants) * s.samples} "
        f"requests, streamed, greedy, thinking off, max_tokens {s.max_tokens}, {s.concurrency} in flight. Each "
        f"length found by search against usage.prompt_tokens with the {SEARCH_VARIANT} prompt (within "
        f"{s.tolerance:.0%} below it, at most {s.max_probes} probes). Every prompt opens with a fresh random "
        "line (no shared prefix). Score: RULER's string_match_all (share of expected values in the answer); "
        f"gate per length >= {s.min_accuracy}"
        + (f", overrides {s.min_accuracy_by_length}" if s.min_accuracy_by_length else "")
        + "."
    )
