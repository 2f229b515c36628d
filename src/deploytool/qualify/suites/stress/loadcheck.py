"""Correctness under load, for the stress suite: the long prompt with needles, short verifiable
probes (sent idle and again under load), and the inter-token latency the running generations
see while the long prompt is in prefill.

A server can keep every stream alive under load and still answer wrong (a batch-dependent
kernel bug, a KV-cache overwrite): only checking answers while the load runs shows it.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import secrets
import statistics
from dataclasses import dataclass, field
from typing import Any

from ....server.client import ChatResult
from ...context import SuiteContext, chat_payload
from ...prose import sentences as prose_sentences
from ...ruler import Variant, build, string_match_all
from ...scoring import extract_flexible, gold_answer
from ...transcripts import transcript

PROBE_NEEDLE_SENTENCES = 60  # about a thousand tokens: short, but a real lookup
PROBE_MAX_TOKENS = 512
GSM8K_INSTRUCTION = "Solve the problem, then give the final answer on its own line as '#### <number>'."


@dataclass
class LongPrompt:
    prompt: str
    answers: list[str]


def long_prompt(n_sentences: int, needles: int) -> LongPrompt:
    """Prose with RULER needles (multiquery when several: every value must come back), opening
    with a unique line so no prefix cache holds any of it."""
    rng = random.Random(secrets.randbits(64))
    haystack = prose_sentences(n_sentences, rng.randrange(2**32))
    variant: Variant = "multiquery" if needles > 1 else "single-number"
    sample = build(variant, haystack, 0.5, rng, opening=f"Reference {secrets.token_hex(8)}.\n")
    return LongPrompt(sample.prompt, sample.answers[:needles] if needles > 1 else sample.answers)


@dataclass
class Probe:
    label: str
    kind: str  # "gsm8k" | "needle"
    question: str = ""
    expected: list[str] = field(default_factory=list)
    correct: bool = False
    t_start: float = 0.0
    t_end: float = 0.0
    transcript: dict[str, Any] = field(default_factory=dict)


def make_probes(n: int) -> list[Probe]:
    """Half GSM8K test items (known answers), half small needle lookups."""
    from ..gsm8k import load_test

    questions = load_test()
    probes = []
    for i in range(n):
        if i % 2 == 0:
            row = questions[i // 2]
            probes.append(
                Probe(
                    label=f"gsm8k[{i // 2}]",
                    kind="gsm8k",
                    question=f"{row['question']}\n{GSM8K_INSTRUCTION}",
                    expected=[gold_answer(row["answer"])],
                )
            )
        else:
            probes.append(Probe(label=f"needle-{i // 2}", kind="needle"))
    return probes


async def run_probes(
    ctx: SuiteContext[Any], probes: list[Probe], concurrency: int, phase: str
) -> list[Probe]:
    """Send every probe once (a fresh needle sample each time); returns new Probe records."""
    sender = ctx.bounded(concurrency)

    async def one(template: Probe) -> Probe:
        probe = Probe(
            label=f"{template.label} {phase}",
            kind=template.kind,
            question=template.question,
            expected=list(template.expected),
        )
        if probe.kind == "needle":
            rng = random.Random(secrets.randbits(64))
            sample = build(
                "single-number",
                prose_sentences(PROBE_NEEDLE_SENTENCES, rng.randrange(2**32)),
                rng.random(),
                rng,
                opening=f"{secrets.token_hex(8)}\n",
            )
            probe.question, probe.expected = sample.prompt, sample.answers
        payload = chat_payload(
            ctx, [{"role": "user", "content": probe.question}], thinking=False, max_tokens=PROBE_MAX_TOKENS
        )
        res = await sender.send(payload)
        probe.t_start, probe.t_end = res.t_start, res.t_end
        if res.error:
            probe.correct = False
        elif probe.kind == "gsm8k":
            probe.correct = extract_flexible(res.content) == probe.expected[0]
        else:
            probe.correct = string_match_all(res.content, probe.expected) == 1.0
        problems = (
            [res.error]
            if res.error
            else ([] if probe.correct else [f"expected {probe.expected}, answer {res.content[:160]!r}"])
        )
        probe.transcript = transcript(
            f"probe {probe.label}", payload, res, passed=probe.correct, problems=problems
        )
        return probe

    return list(await asyncio.gather(*(one(p) for p in probes)))


def probe_accuracy(probes: list[Probe]) -> float:
    return round(sum(p.correct for p in probes) / len(probes), 4) if probes else 0.0


def overlap(probes: list[Probe], load: list[ChatResult]) -> int:
    """Probes that started before the last load request ended (they met a busy server)."""
    ends = [r.t_end for r in load if r.t_end]
    if not ends:
        return 0
    return sum(1 for p in probes if p.t_start < max(ends))


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def itl_during(streams: list[ChatResult], long: ChatResult) -> dict[str, Any]:
    """Inter-token gaps of `streams` whose later token arrived while `long` was in prefill (from
    its send to its first token), as percentiles in seconds; beside them, all gaps."""
    start, end = long.t_start, long.t_first_token or long.t_end
    during, every = [], []
    for res in streams:
        times = res.chunk_times
        for a, b in itertools.pairwise(times):
            every.append(b - a)
            if start <= b <= end:
                during.append(b - a)

    def summary(gaps: list[float]) -> dict[str, Any]:
        if not gaps:
            return {"gaps": 0}
        return {
            "gaps": len(gaps),
            **{f"p{q}_s": round(_percentile(gaps, q), 5) for q in (50, 90, 99)},
            "max_s": round(max(gaps), 5),
            "mean_s": round(statistics.fmean(gaps), 5),
        }

    return {"window_s": round(end - start, 4), "during_prefill": summary(during), "whole_run": summary(every)}
