"""needle: a fresh random needle (RULER style: "One of the special magic numbers for {key} is:
{value}.") hidden at several depths of a filler haystack built to a target prompt length
(the profile's, 225K tokens by default, capped by the context length). The length is found by
search against the server's own `usage.prompt_tokens` (qualify/haystack.py). Passes when the
value is in the answer at every depth; reports prompt tokens, time to first token and cached
tokens per depth. Every prompt (length probes included) opens with a fresh random line, so a
prefix cache cannot serve one depth's prompt from an earlier one.
"""

from __future__ import annotations

import random
import secrets
from typing import Any

from pydantic import Field

from ..base import (Gate, ServerInfo, SuiteContext, SuiteResult, SuiteSettings, TranscriptLog, Verdict,
                    chat_payload, response_problems, transcript)
from ..haystack import filler_sentences, first_guess, insert_at_depth, search_length

name = "needle"

_ADJECTIVES = ("amber", "quiet", "northern", "hollow", "silver", "crooked", "distant", "gentle", "rapid", "frozen")
_NOUNS = ("harbor", "lantern", "orchard", "meadow", "compass", "glacier", "violin", "canyon", "ledger", "falcon")

INTRO = ("Some special magic numbers are hidden within the following text. Make sure to memorize them. "
         "I will quiz you about the numbers afterwards.\n")


class Settings(SuiteSettings):
    target_tokens: int = Field(default=225_000, ge=256, description="Prompt length to reach (capped by context).")
    depths: list[float] = Field(default=[0.1, 0.3, 0.5, 0.7, 0.9], min_length=1)
    max_tokens: int = Field(default=128, ge=8, description="Room for the answer.")
    tolerance: float = Field(default=0.01, gt=0, lt=0.5, description="Accepted shortfall, fraction of target.")
    max_probes: int = Field(default=8, ge=1, description="Length-search requests at most.")
    request_timeout_s: float = 900.0


def applies_to(profile: Any, server: ServerInfo) -> str | None:
    return None


def make_needle(rng: random.Random) -> tuple[str, str]:
    return f"{rng.choice(_ADJECTIVES)}-{rng.choice(_NOUNS)}", str(rng.randrange(1_000_000, 9_999_999))


def fresh_opening() -> str:
    """A random first line, new for every request: a prefix (radix) cache then finds nothing to
    reuse between the length probes and the depth prompts, whose filler is otherwise the same."""
    return f"{secrets.token_hex(8)}\n"  # random from the first character: no shared leading token


def build_prompt(units: int, key: str, value: str, depth: float, opening: str = "") -> str:
    needle = f"One of the special magic numbers for {key} is: {value}."
    body = " ".join(insert_at_depth(filler_sentences(units), needle, depth))
    return f"{opening}{INTRO}{body}\nWhat is the special magic number for {key} mentioned in the provided text?"


async def run(ctx: SuiteContext) -> SuiteResult:
    s: Settings = ctx.settings
    result = SuiteResult(name=name, verdict=Verdict.ERROR)
    key, value = make_needle(random.SystemRandom())
    context = ctx.context_length
    target = s.target_tokens
    capped = context is not None and target > context - s.max_tokens - 64
    if capped:
        target = context - s.max_tokens - 64  # room for the answer and the chat template's closing tokens
    tolerance = max(16, int(target * s.tolerance))
    ctx.set_total(len(s.depths) + s.max_probes)
    probe_errors: list[str] = []

    async def measure(units: int) -> int | None:
        payload = chat_payload(ctx, [{"role": "user", "content": build_prompt(units, key, value, 0.5, fresh_opening())}],
                               max_tokens=1)
        res = await ctx.client.chat(payload)
        ctx.advance()
        if res.error or res.prompt_tokens is None:
            probe_errors.append(f"{units} sentences: {res.error or 'no usage.prompt_tokens in the response'}")
            return None
        return int(res.prompt_tokens)

    search = await search_length(measure, target, guess=first_guess(target), tolerance=tolerance,
                                 max_probes=s.max_probes)
    result.figures = {
        "target_tokens": target, "requested_tokens": s.target_tokens, "capped_by_context": capped,
        "context_length": context, "haystack_sentences": search.units, "measured_prompt_tokens": search.tokens,
        "search_probes": [{"sentences": p.units, "prompt_tokens": p.tokens} for p in search.probes],
        "key": key, "value": value,
    }
    if not search.found:
        last = f"; last error: {probe_errors[-1]}" if probe_errors else ""
        result.gates.append(Gate(name="haystack reaches the target length", threshold=f"{target - tolerance}..{target}",
                                 measured=search.tokens, passed=False, comparison="in",
                                 detail=f"length search ended after {len(search.probes)} probes{last}"))
        result.method = _method(s, target, tolerance)
        return result.judge()

    log = TranscriptLog()
    rows = []
    for depth in s.depths:
        prompt = build_prompt(search.units, key, value, depth, fresh_opening())
        payload = chat_payload(ctx, [{"role": "user", "content": prompt}],
                               stream=True, max_tokens=s.max_tokens, thinking=False)
        res = await ctx.client.chat(payload)
        problems = response_problems(res)
        found = not res.error and value in res.content
        if not res.error and not found:
            problems.append(f"the answer does not contain {value}: {res.content[:160]!r}")
        rows.append({"depth": depth, "prompt_tokens": res.prompt_tokens, "ttft_s": _round(res.ttft),
                     "cached_tokens": res.cached_tokens, "latency_s": _round(res.latency), "found": found,
                     "error": res.error})
        log.add(transcript(f"depth {depth:g}", payload, res, passed=found, problems=problems))
        ctx.advance()
    result.figures["depths"] = rows
    found_n = sum(r["found"] for r in rows)
    missed = [f"{r['depth']:g}" + (f" ({r['error']})" if r["error"] else "") for r in rows if not r["found"]]
    result.gates.append(Gate.all_of("needle value found at every depth", found_n, len(rows),
                                    detail=f"missed at depth {', '.join(missed)}" if missed else ""))
    result.method = _method(s, target, tolerance)
    result.transcripts = log.items
    return result.judge()


def _method(s: Settings, target: int, tolerance: int) -> str:
    return (f"Haystack of filler sentences with one needle 'One of the special magic numbers for <key> is: <value>.' "
            f"(fresh random key and 7-digit value each run), every prompt opening with a fresh random line so no "
            f"prefix cache serves one from another; its size searched with max_tokens=1 requests until "
            f"usage.prompt_tokens is within {tolerance} tokens below {target} (at most {s.max_probes} probes); then one "
            f"streamed, greedy, thinking-off request per depth {s.depths} with max_tokens {s.max_tokens}; "
            "pass when the value appears in the answer. TTFT per depth is reported with the server's "
            "cached_tokens (usage.prompt_tokens_details), which should be near zero.")


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
