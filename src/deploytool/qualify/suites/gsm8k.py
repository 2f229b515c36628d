"""gsm8k: grade-school math, the full 1,319-question test set shipped in deploytool/data/gsm8k
(MIT license), in chat format with few-shot examples from the train split (never the test
questions), greedy, many requests in flight. Strict (`#### N`) and flexible extraction are
reported side by side, with a Wilson 95% interval; thinking off and on are separate runs.
Gate: the flexible (or strict, by setting) accuracy of each thinking mode >= min_accuracy, and
no request may fail (a 5xx or a dropped answer is a failure, not a wrong answer to ignore).
"""

from __future__ import annotations

import asyncio
import json
import re
from importlib import resources
from typing import Any, Literal

from pydantic import Field

from ..base import (Gate, ServerInfo, SuiteContext, SuiteResult, SuiteSettings, TranscriptLog, Verdict,
                    chat_payload, transcript)
from ..scoring import extract_flexible, extract_strict, gold_answer, normal_interval, wilson_interval

name = "gsm8k"
INSTRUCTION = "Solve the problem step by step, then give the final answer on its own line as '#### <number>'."
_CALCULATOR = re.compile(r"<<[^>]*>>")  # GSM8K's calculator annotations: not part of the prose


class Settings(SuiteSettings):
    min_accuracy: float = Field(default=0.90, ge=0, le=1, description="Gate, per thinking mode.")
    gate_on: Literal["flexible", "strict"] = Field(default="flexible", description="Which extraction the gate uses.")
    concurrency: int = Field(default=64, ge=1, description="Requests in flight.")
    n_shots: int = Field(default=5, ge=0, le=16, description="Few-shot examples from the train split.")
    thinking: list[bool] = Field(default=[False, True], min_length=1, description="Thinking modes, each its own run.")
    max_tokens: int = Field(default=1024, ge=16, description="Answer budget with thinking off.")
    max_tokens_thinking: int = Field(default=8192, ge=16, description="Answer budget with thinking on.")
    request_timeout_s: float = 900.0
    budget_s: float = 4 * 3600.0


def applies_to(profile: Any, server: ServerInfo) -> str | None:
    return None


def _read_jsonl(filename: str) -> list[dict[str, str]]:
    text = (resources.files("deploytool") / "data" / "gsm8k" / filename).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def load_test() -> list[dict[str, str]]:
    return _read_jsonl("test.jsonl")


def fewshot_messages(n_shots: int) -> list[dict[str, str]]:
    """The first n train problems as user/assistant turns, the answer ending in '#### N'."""
    messages = []
    for row in _read_jsonl("train_fewshot.jsonl")[:n_shots]:
        messages.append({"role": "user", "content": f"{row['question']}\n{INSTRUCTION}"})
        messages.append({"role": "assistant", "content": _CALCULATOR.sub("", row["answer"])})
    return messages


async def run(ctx: SuiteContext) -> SuiteResult:
    s: Settings = ctx.settings
    questions, limited = ctx.apply_limit(load_test())
    shots = fewshot_messages(s.n_shots)
    ctx.set_total(len(questions) * len(s.thinking))
    semaphore = asyncio.Semaphore(s.concurrency)
    log = TranscriptLog()
    result = SuiteResult(name=name, verdict=Verdict.ERROR, limited=limited)
    modes: dict[str, Any] = {}

    async def one(index: int, row: dict[str, str], thinking: bool) -> dict[str, Any]:
        gold = gold_answer(row["answer"])
        payload = chat_payload(ctx, shots + [{"role": "user", "content": f"{row['question']}\n{INSTRUCTION}"}],
                               thinking=thinking,
                               max_tokens=s.max_tokens_thinking if thinking else s.max_tokens)
        async with semaphore:
            res = await ctx.client.chat(payload)
        ctx.advance()
        strict, flexible = extract_strict(res.content), extract_flexible(res.content)
        outcome = {"index": index, "gold": gold, "strict": strict, "flexible": flexible,
                   "strict_ok": strict == gold, "flexible_ok": flexible == gold, "error": res.error,
                   "completion_tokens": res.completion_tokens, "latency_s": round(res.latency, 3)}
        ok = outcome[f"{s.gate_on}_ok"] and not res.error
        problems = [res.error] if res.error else ([] if ok else [f"expected {gold}, extracted strict={strict} flexible={flexible}"])
        # Only the question goes into the transcript: the few-shot turns are the same every time.
        short = dict(payload, messages=payload["messages"][-1:])
        log.add(transcript(f"test[{index}] thinking-{'on' if thinking else 'off'}", short, res,
                           passed=ok, problems=problems, gold=gold))
        return outcome

    for thinking in s.thinking:
        outcomes = await asyncio.gather(*(one(i, row, thinking) for i, row in enumerate(questions)))
        n = len(outcomes)
        strict_ok = sum(o["strict_ok"] for o in outcomes)
        flexible_ok = sum(o["flexible_ok"] for o in outcomes)
        errors = [o for o in outcomes if o["error"]]
        gate_ok = strict_ok if s.gate_on == "strict" else flexible_ok
        mode = "thinking-on" if thinking else "thinking-off"
        wilson = wilson_interval(gate_ok, n)
        tokens = [o["completion_tokens"] for o in outcomes if o["completion_tokens"]]
        modes[mode] = {
            "questions": n,
            "strict_accuracy": _ratio(strict_ok, n), "flexible_accuracy": _ratio(flexible_ok, n),
            "strict_correct": strict_ok, "flexible_correct": flexible_ok,
            "ci95_wilson": [round(wilson.low, 4), round(wilson.high, 4)],
            "ci95_normal": [round(v, 4) for v in vars(normal_interval(gate_ok, n)).values()],
            "request_errors": len(errors),
            "mean_completion_tokens": round(sum(tokens) / len(tokens), 1) if tokens else None,
        }
        result.gates.append(Gate.at_least(f"{mode} {s.gate_on} accuracy", _ratio(gate_ok, n), s.min_accuracy,
                                          detail=f"95% CI {wilson.low:.3f}..{wilson.high:.3f}, n={n}"))
        first = f"; first: {errors[0]['error']}" if errors else ""
        result.gates.append(Gate.all_of(f"{mode} requests answered without error", n - len(errors), n,
                                        detail=f"{len(errors)} request(s) failed{first}" if errors else ""))
    result.figures = {"modes": modes, "n_shots": s.n_shots, "gate_on": s.gate_on}
    result.method = (
        f"{len(questions)} of 1,319 GSM8K test questions" + (f" (--limit {ctx.limit})" if limited else "")
        + f", each a chat with {s.n_shots} few-shot turns from the train split and the instruction "
        f"{INSTRUCTION!r}; greedy (temperature 0), max_tokens {s.max_tokens} (thinking off) / "
        f"{s.max_tokens_thinking} (thinking on), {s.concurrency} in flight. Strict: the number after the last '####'; "
        "flexible: '####', \\boxed{}, 'the answer is', else the last number; compared as exact decimals. "
        "Intervals: Wilson score (gate metric), normal approximation for reference."
    )
    result.transcripts = log.items
    return result.judge()


def _ratio(k: int, n: int) -> float:
    return round(k / n, 4) if n else 0.0
