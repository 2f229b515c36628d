"""stress: seven long sampled generations (temperature 0.7) running alongside one prompt near
the context limit (200K tokens by default, capped by the context length), all streamed at once.
Passes when every request completes without a 5xx, no stream drops (each ends with [DONE]),
every sampled generation ran to its length (with ignore_eos: finish_reason "length" and exactly
max_tokens), the long prompt was taken whole (prompt_tokens >= 90% of its target) and finished,
and the server is healthy afterwards. Reports latencies, tokens and errors per request.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import httpx
from pydantic import Field

from ...client import ChatResult
from ..base import (Gate, ServerInfo, SuiteContext, SuiteResult, SuiteSettings, TranscriptLog, Verdict,
                    chat_payload, response_problems, transcript)
from ..haystack import filler_sentences

name = "stress"

TOPICS = ("a lighthouse keeper who finds a message in a bottle", "the history of the printing press",
          "how a glacier shapes a valley", "a chess tournament decided in the last round",
          "the life cycle of a star", "a city built on canals", "an expedition to the deep sea",
          "the invention of the telegraph")
CALIBRATION_SENTENCES = 2000
LONG_PROMPT_MIN_FRACTION = 0.9  # the long prompt must reach this share of its target (else it was cut)


class Settings(SuiteSettings):
    sampled_requests: int = Field(default=7, ge=0, description="Long sampled generations.")
    max_tokens: int = Field(default=4096, ge=1, description="Length of each sampled generation.")
    temperature: float = Field(default=0.7, ge=0)
    ignore_eos: bool = Field(default=True, description="Make every generation run to max_tokens (SGLang extension).")
    long_prompt_tokens: int = Field(default=200_000, ge=0, description="The near-limit prompt; 0 leaves it out.")
    long_max_tokens: int = Field(default=64, ge=1)
    health_path: str = Field(default="/health_generate", description="Must answer 200 afterwards.")
    health_timeout_s: float = Field(default=60.0, gt=0)
    request_timeout_s: float = 1800.0


def applies_to(profile: Any, server: ServerInfo) -> str | None:
    return None


def _long_prompt(sentences: int) -> str:
    return ("Read the following text and then summarise it in one sentence.\n"
            + " ".join(filler_sentences(sentences)))


async def _calibrate(ctx: SuiteContext, target: int) -> tuple[int, str | None]:
    """Sentences for a prompt of about `target` tokens, from one short request's token count."""
    res = await ctx.client.chat(chat_payload(ctx, [{"role": "user", "content": _long_prompt(CALIBRATION_SENTENCES)}],
                                             max_tokens=1))
    if res.error or not res.prompt_tokens:
        return 0, f"calibration request failed: {res.error or 'no usage.prompt_tokens'}"
    per_sentence = res.prompt_tokens / CALIBRATION_SENTENCES
    return int(target * 0.98 / per_sentence), None  # 2% under: the fixed overhead is counted in the rate


async def run(ctx: SuiteContext) -> SuiteResult:
    s: Settings = ctx.settings
    result = SuiteResult(name=name, verdict=Verdict.ERROR)
    log = TranscriptLog()
    context = ctx.context_length
    target = s.long_prompt_tokens
    if context is not None and target > context - s.long_max_tokens - 64:
        target = context - s.long_max_tokens - 64
    ctx.set_total(s.sampled_requests + (1 if target > 0 else 0) + 1)

    jobs: list[tuple[str, dict[str, Any]]] = []
    if target > 0:
        sentences, why = await _calibrate(ctx, target)
        if why:
            result.gates.append(Gate(name="long prompt built", threshold="calibrated", measured=why, passed=False,
                                     comparison="=="))
        else:
            jobs.append(("long-prompt", chat_payload(ctx, [{"role": "user", "content": _long_prompt(sentences)}],
                                                     stream=True, max_tokens=s.long_max_tokens)))
    for i in range(s.sampled_requests):
        topic = TOPICS[i % len(TOPICS)]
        extra = {"ignore_eos": True} if s.ignore_eos else {}
        jobs.append((f"sampled-{i + 1}", chat_payload(
            ctx, [{"role": "user", "content": f"Write a long, detailed essay about {topic}."}], stream=True,
            max_tokens=s.max_tokens, temperature=s.temperature, seed=1000 + i, **extra)))

    async def one(label: str, payload: dict[str, Any]) -> ChatResult:
        res = await ctx.client.chat(payload)
        ctx.advance()
        return res

    started = time.perf_counter()
    results = await asyncio.gather(*(one(label, p) for label, p in jobs))
    wall = time.perf_counter() - started
    rows = []
    for (label, payload), res in zip(jobs, results):
        problems = response_problems(res)
        if not res.error and not res.saw_done:
            problems.append("stream ended without [DONE]")
        if not problems:
            problems += _length_problems(label, res, s, target)
        rows.append({"request": label, "ok": not problems, "status": res.status, "prompt_tokens": res.prompt_tokens,
                     "completion_tokens": res.completion_tokens, "ttft_s": _r(res.ttft), "latency_s": _r(res.latency),
                     "finish_reason": res.finish_reason, "error": problems[0] if problems else None})
        log.add(transcript(label, payload, res, passed=not problems, problems=problems))

    health = await _health_after(ctx, s)
    ctx.advance()
    failed = [r for r in rows if not r["ok"]]
    fivexx = [r for r in rows if (r["status"] or 0) >= 500]
    result.gates += [
        Gate.all_of("requests completed", len(rows) - len(failed), len(rows),
                    detail="; ".join(f"{r['request']}: {r['error']}" for r in failed[:3])),
        Gate.equal("requests answered 5xx", len(fivexx), 0),
        Gate.equal(f"{s.health_path} afterwards", health["status"], 200, detail=health.get("error") or ""),
    ]
    # Latency figures over the sampled generations only; the long prompt's are reported apart.
    latencies = [r["latency_s"] for r in rows
                 if r["request"].startswith("sampled") and r["ok"] and r["latency_s"] is not None]
    long_row = next((r for r in rows if r["request"] == "long-prompt"), None)
    result.figures = {
        "requests": rows, "wall_s": _r(wall),
        "long_prompt_target_tokens": target if long_row is not None else None,
        "latency_max_s": max(latencies) if latencies else None,
        "latency_median_s": statistics.median(latencies) if latencies else None,
        "long_prompt_latency_s": long_row["latency_s"] if long_row is not None else None,
        "long_prompt_ttft_s": long_row["ttft_s"] if long_row is not None else None,
        "errors": [r["error"] for r in failed], "health_after": health,
    }
    long_text = (f" and one prompt of about {target} tokens of filler (sized from one {CALIBRATION_SENTENCES}-sentence "
                 f"calibration request), max_tokens {s.long_max_tokens}, which must finish with prompt_tokens >= "
                 f"{LONG_PROMPT_MIN_FRACTION:.0%} of that" if long_row is not None else "")
    result.method = (
        f"All at once, streamed: {s.sampled_requests} essays (temperature {s.temperature}, max_tokens {s.max_tokens}"
        f"{', ignore_eos: each must end with finish_reason length at exactly max_tokens' if s.ignore_eos else ''}, "
        f"fixed seeds){long_text}; then GET {s.health_path}. Each request's budget: {s.request_timeout_s:g} s. "
        "Median and max latency are over the sampled generations; the long prompt's latency is reported apart."
    )
    result.transcripts = log.items
    return result.judge()


def _length_problems(label: str, res: ChatResult, s: Settings, target: int) -> list[str]:
    """Did the request really run long? A sampled generation with ignore_eos must reach max_tokens
    (else the stress never happened); the long prompt must have been taken whole and finished."""
    if label.startswith("sampled") and s.ignore_eos:
        problems = []
        if res.finish_reason != "length":
            problems.append(f"finish_reason {res.finish_reason!r}, expected 'length' (ignore_eos)")
        if res.completion_tokens != s.max_tokens:
            problems.append(f"completion_tokens {res.completion_tokens}, expected max_tokens {s.max_tokens} "
                            "(ignore_eos: the generation did not run to its length)")
        return ["; ".join(problems)] if problems else []
    if label == "long-prompt":
        problems = []
        if res.finish_reason not in ("stop", "length"):
            problems.append(f"finish_reason {res.finish_reason!r}, expected 'stop' or 'length'")
        floor = int(LONG_PROMPT_MIN_FRACTION * target)
        if res.prompt_tokens is None or res.prompt_tokens < floor:
            problems.append(f"prompt_tokens {res.prompt_tokens}, expected >= {floor} "
                            f"({LONG_PROMPT_MIN_FRACTION:.0%} of the {target}-token target): the prompt was not "
                            "taken whole")
        return ["; ".join(problems)] if problems else []
    return []


async def _health_after(ctx: SuiteContext, s: Settings) -> dict[str, Any]:
    deadline = time.monotonic() + s.health_timeout_s
    last: dict[str, Any] = {"status": None}
    while True:
        try:
            response = await ctx.client.get(s.health_path, timeout=min(10.0, s.health_timeout_s))
            last = {"status": response.status_code}
            if response.status_code == 200:
                return last
            last["error"] = f"GET {s.health_path} answered HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            last = {"status": None, "error": f"GET {s.health_path} failed: {type(exc).__name__}: {exc or 'no answer'}"}
        if time.monotonic() >= deadline:
            return last
        await asyncio.sleep(1.0)


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
