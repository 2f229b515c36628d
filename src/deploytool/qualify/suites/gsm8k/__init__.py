"""gsm8k: grade-school math on the full 1,319-question test set (deploytool/data/gsm8k, MIT).

Two prompt styles, each its own run per thinking mode:
* `lm-eval` (the default figure, the gate's): lm-evaluation-harness's `gsm8k` task as chat,
  prompt, few-shot draws, stop strings, filters and exact-match normalisation as lm-eval 0.4
  does them (qualify/suites/gsm8k/lmeval.py), reported as `strict-match` and `flexible-extract`, so the
  figure sits next to a published lm-eval number;
* `deploytool`: deploytool's own instruction ("... '#### <number>'") with the first train
  problems as examples, scored strict/flexible by qualify/scoring.py.
Thinking off is greedy; thinking on is sampled as the model is meant to be run (temperature,
top-p, top-k from the settings, defaulting to the Qwen3 card's thinking values; seed recorded).
Replies cut at max_tokens (finish_reason "length") are counted. Per-question outcomes are
stored ('1'/'0' per question) and, when the previous release's results hold the same run, an
exact McNemar test on the same questions fails a significant drop even above min_accuracy.
"""

from __future__ import annotations

import asyncio
import json
import re
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ....server.facts import ServerFacts
from ...context import SuiteContext, chat_payload
from ...paired import compare
from ...scoring import extract_flexible, extract_strict, gold_answer, normal_interval, wilson_interval
from ...suite_api import Gate, SuiteResult, SuiteSettings, Verdict, previous_suite
from ...transcripts import TranscriptLog, transcript
from . import lmeval

name = "gsm8k"
INSTRUCTION = "Solve the problem step by step, then give the final answer on its own line as '#### <number>'."
_CALCULATOR = re.compile(r"<<[^>]*>>")  # GSM8K's calculator annotations: not part of the prose
METRICS = {"lm-eval": ("strict-match", "flexible-extract"), "deploytool": ("strict", "flexible")}


class Sampling(BaseModel):
    """Thinking-on sampling (defaults: the Qwen3 model card's recommended thinking values)."""

    model_config = ConfigDict(extra="forbid")
    temperature: float = Field(default=0.6, ge=0)
    top_p: float = Field(default=0.95, gt=0, le=1)
    top_k: int = Field(default=20, ge=-1)
    seed: int = Field(default=1234, description="Request i is sent with seed + i; recorded in the report.")


class Settings(SuiteSettings):
    min_accuracy: float = Field(default=0.90, ge=0, le=1, description="Gate, per thinking mode.")
    styles: list[Literal["lm-eval", "deploytool"]] = Field(
        default=["lm-eval"], min_length=1, description="Prompt styles; the first is the gate's."
    )
    gate_on: Literal["flexible", "strict"] = Field(
        default="flexible", description="flexible(-extract) or strict(-match): which filter the gate uses."
    )
    concurrency: int = Field(default=64, ge=1, description="Requests in flight.")
    n_shots: int = Field(default=5, ge=0, le=16, description="Few-shot examples from the train split.")
    thinking: list[bool] = Field(
        default=[False, True], min_length=1, description="Thinking modes, each its own run."
    )
    max_tokens: int = Field(default=1024, ge=16, description="deploytool style, thinking off.")
    lmeval_max_tokens: int = Field(
        default=lmeval.MAX_GEN_TOKS, ge=16, description="lm-eval style, thinking off (max_gen_toks)."
    )
    max_tokens_thinking: int = Field(default=8192, ge=16, description="Answer budget with thinking on.")
    thinking_sampling: Sampling = Field(default_factory=Sampling)
    regression_alpha: float = Field(
        default=0.05,
        gt=0,
        lt=1,
        description="McNemar p below this with more questions lost than gained fails the gate.",
    )
    request_timeout_s: float = 900.0
    budget_s: float = 4 * 3600.0


def applies_to(profile: Any, server: ServerFacts) -> str | None:
    return None


def _read_jsonl(filename: str) -> list[dict[str, str]]:
    text = (resources.files("deploytool") / "data" / "gsm8k" / filename).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def load_test() -> list[dict[str, str]]:
    return _read_jsonl("test.jsonl")


def fewshot_messages(n_shots: int) -> list[dict[str, str]]:
    """deploytool style: the first n train problems as user/assistant turns ending in '#### N'."""
    messages = []
    for row in _read_jsonl("train_fewshot.jsonl")[:n_shots]:
        messages.append({"role": "user", "content": f"{row['question']}\n{INSTRUCTION}"})
        messages.append({"role": "assistant", "content": _CALCULATOR.sub("", row["answer"])})
    return messages


def score(style: str, content: str, answer_field: str) -> dict[str, Any]:
    """Extractions and correctness of one reply, under the style's own rules."""
    if style == "lm-eval":
        got = lmeval.extract(content)
        return {"extracted": got, "ok": {k: lmeval.exact_match(v, answer_field) for k, v in got.items()}}
    gold = gold_answer(answer_field)
    found = {"strict": extract_strict(content), "flexible": extract_flexible(content)}
    return {"extracted": found, "ok": {k: v == gold for k, v in found.items()}}


def _mode_label(style: str, thinking: bool) -> str:
    return f"{style} thinking-{'on' if thinking else 'off'}"


async def run(ctx: SuiteContext[Settings]) -> SuiteResult:
    s = ctx.settings
    questions, limited = ctx.apply_limit(load_test())
    draws = lmeval.fewshot_indices(len(questions), s.n_shots)
    shots = fewshot_messages(s.n_shots)
    runs = [(style, thinking) for style in s.styles for thinking in s.thinking]
    ctx.set_total(len(questions) * len(runs))
    log = TranscriptLog()
    result = SuiteResult(name=name, verdict=Verdict.ERROR, limited=limited)
    previous, why_not = previous_suite(
        ctx.previous_results, name, lambda suite: bool((suite.get("figures") or {}).get("modes"))
    )
    modes: dict[str, Any] = {}
    gate_style = s.styles[0]

    async def one(index: int, row: dict[str, str], style: str, thinking: bool) -> dict[str, Any]:
        payload = _question_payload(ctx, s, row["question"], style, thinking, index, draws[index], shots)
        res = await ctx.send(payload)
        ctx.advance()
        scored = score(style, res.content, row["answer"])
        strict_name, flexible_name = METRICS[style]
        gate_name = flexible_name if s.gate_on == "flexible" else strict_name
        ok = scored["ok"][gate_name] and not res.error
        problems = (
            [res.error]
            if res.error
            else ([] if ok else [f"expected {gold_answer(row['answer'])}, extracted {scored['extracted']}"])
        )
        # Only the question goes into the transcript: the few-shot turns are the same every time.
        short = dict(payload, messages=payload["messages"][-1:])
        log.add(
            transcript(
                f"test[{index}] {_mode_label(style, thinking)}",
                short,
                res,
                passed=ok,
                problems=problems,
                gold=gold_answer(row["answer"]),
            )
        )
        return {
            "ok": {k: v and not res.error for k, v in scored["ok"].items()},
            "error": res.error,
            "length": res.finish_reason == "length",
            "completion_tokens": res.completion_tokens,
        }

    for style, thinking in runs:
        outcomes = await asyncio.gather(*(one(i, row, style, thinking) for i, row in enumerate(questions)))
        label = _mode_label(style, thinking)
        modes[label] = _mode_figures(style, thinking, outcomes, s)
        if style == gate_style:
            _gates(result, label, modes[label], outcomes, s)
            _regression_gate(result, label, modes[label], previous, s)
    result.figures = {
        "modes": modes,
        "n_shots": s.n_shots,
        "gate_on": s.gate_on,
        "gate_style": gate_style,
        "compared_with": str(ctx.previous_results) if previous else (why_not or "no previous release"),
    }
    result.method = _method(s, len(questions), ctx.limit if limited else None)
    result.transcripts = log.items
    return result.judge()


def _question_payload(
    ctx: SuiteContext[Settings],
    s: Settings,
    question: str,
    style: str,
    thinking: bool,
    index: int,
    draw: list[int],
    shots: list[dict[str, str]],
) -> dict[str, Any]:
    """The chat request of one test question in one mode: lm-eval's own prompt, stops and seed,
    or deploytool's few-shot turns; with thinking on, the thinking sampling (seeded per question)."""
    extra: dict[str, Any] = {}
    if style == "lm-eval":
        messages = lmeval.messages(question, draw)
        extra.update(stop=lmeval.STOP, seed=lmeval.SEED)
        max_tokens = s.max_tokens_thinking if thinking else s.lmeval_max_tokens
    else:
        messages = [*shots, {"role": "user", "content": f"{question}\n{INSTRUCTION}"}]
        max_tokens = s.max_tokens_thinking if thinking else s.max_tokens
    temperature = 0.0
    if thinking:
        sampling = s.thinking_sampling
        temperature = sampling.temperature
        extra.update(top_p=sampling.top_p, top_k=sampling.top_k, seed=sampling.seed + index)
    return chat_payload(
        ctx, messages, thinking=thinking, max_tokens=max_tokens, temperature=temperature, **extra
    )


def _mode_figures(style: str, thinking: bool, outcomes: list[dict[str, Any]], s: Settings) -> dict[str, Any]:
    n = len(outcomes)
    strict_name, flexible_name = METRICS[style]
    gate_name = flexible_name if s.gate_on == "flexible" else strict_name
    correct = {k: sum(o["ok"][k] for o in outcomes) for k in (strict_name, flexible_name)}
    wilson = wilson_interval(correct[gate_name], n)
    tokens = [o["completion_tokens"] for o in outcomes if o["completion_tokens"]]
    sampling = s.thinking_sampling
    return {
        "style": style,
        "thinking": thinking,
        "questions": n,
        **{f"{k}_accuracy": _ratio(v, n) for k, v in correct.items()},
        **{f"{k}_correct": v for k, v in correct.items()},
        "gate_metric": gate_name,
        "ci95_wilson": [round(wilson.low, 4), round(wilson.high, 4)],
        "ci95_normal": [round(v, 4) for v in vars(normal_interval(correct[gate_name], n)).values()],
        "request_errors": sum(1 for o in outcomes if o["error"]),
        "cut_at_max_tokens": sum(1 for o in outcomes if o["length"]),
        "mean_completion_tokens": round(sum(tokens) / len(tokens), 1) if tokens else None,
        "sampling": (
            {
                "temperature": sampling.temperature,
                "top_p": sampling.top_p,
                "top_k": sampling.top_k,
                "seed": f"{sampling.seed} + question index",
            }
            if thinking
            else {"temperature": 0.0}
        ),
        # One character per question, test-set order: what the next release is compared with.
        "per_question": "".join("1" if o["ok"][gate_name] else "0" for o in outcomes),
    }


def _gates(
    result: SuiteResult, label: str, figures: dict[str, Any], outcomes: list[dict[str, Any]], s: Settings
) -> None:
    n = figures["questions"]
    metric = figures["gate_metric"]
    result.gates.append(
        Gate.at_least(
            f"{label} {metric} accuracy",
            figures[f"{metric}_accuracy"],
            s.min_accuracy,
            detail=f"95% CI {figures['ci95_wilson'][0]:.3f}..{figures['ci95_wilson'][1]:.3f}, "
            f"n={n}; {figures['cut_at_max_tokens']} cut at max_tokens",
        )
    )
    errors = [o["error"] for o in outcomes if o["error"]]
    first = f"; first: {errors[0]}" if errors else ""
    result.gates.append(
        Gate.all_of(
            f"{label} requests answered without error",
            n - len(errors),
            n,
            detail=f"{len(errors)} request(s) failed{first}" if errors else "",
        )
    )


def _regression_gate(
    result: SuiteResult, label: str, figures: dict[str, Any], previous: dict[str, Any] | None, s: Settings
) -> None:
    before = (previous or {}).get("figures", {}).get("modes", {}).get(label) or {}
    if not before.get("per_question") or before.get("gate_metric") != figures["gate_metric"]:
        return
    paired = compare(before["per_question"], figures["per_question"])
    figures["vs_previous"] = paired.as_dict()
    result.gates.append(
        Gate(
            name=f"{label} no significant drop vs the previous release (McNemar exact)",
            threshold=f"p >= {s.regression_alpha} or no net loss",
            measured=f"p={paired.p_value:.4g}",
            passed=not paired.regressed(s.regression_alpha),
            comparison=">=",
            detail=(
                f"{paired.questions} same questions: {paired.before_correct} -> {paired.now_correct} right; "
                f"{len(paired.got_worse)} flipped to wrong (e.g. {paired.got_worse[:10]}), "
                f"{len(paired.got_better)} flipped to right"
            ),
        )
    )


def _method(s: Settings, n: int, limit: int | None) -> str:
    parts = [f"{n} of 1,319 GSM8K test questions" + (f" (--limit {limit})" if limit else "") + "."]
    if "lm-eval" in s.styles:
        parts.append(
            f"lm-eval style: lm-evaluation-harness 0.4 gsm8k as chat ('Question: ...\\nAnswer:', {s.n_shots} "
            "few-shot turns drawn from the train split by random.Random(1234) as lm-eval does, stop "
            f"{lmeval.STOP}, max_tokens {s.lmeval_max_tokens} thinking off, seed {lmeval.SEED}); strict-match "
            "and flexible-extract filters and exact-match normalisation as lm-eval's."
        )
    if "deploytool" in s.styles:
        parts.append(
            f"deploytool style: {s.n_shots} few-shot turns (first train problems) and the instruction "
            f"{INSTRUCTION!r}, max_tokens {s.max_tokens}; strict = the number after the last '####', "
            "flexible = '####', \\boxed{}, 'the answer is', else the last number, compared as exact decimals."
        )
    sampling = s.thinking_sampling
    parts.append(
        f"Thinking off greedy; thinking on sampled (temperature {sampling.temperature}, top_p {sampling.top_p}, "
        f"top_k {sampling.top_k}, seed {sampling.seed} + question index), max_tokens {s.max_tokens_thinking}. "
        f"{s.concurrency} in flight. Gate: the first style's {s.gate_on} accuracy >= {s.min_accuracy} "
        f"(Wilson 95% interval), and McNemar's exact test against the previous release's per-question "
        f"outcomes (p < {s.regression_alpha} with a net loss fails)."
    )
    return " ".join(parts)


def _ratio(k: int, n: int) -> float:
    return round(k / n, 4) if n else 0.0
