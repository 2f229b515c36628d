"""Long prompts of an exact size, measured with the server's own token count.

The haystack is filler sentences (RULER's "noise" style: plain, repetitive, number-free, so
nothing in it competes with a needle). Its length in tokens depends on the model's tokenizer,
which deploytool does not load; so the number of sentences is found by search against
`usage.prompt_tokens` of the server itself: a first guess from characters, then secant steps
inside a bracket, bisection when a step would leave it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

FILLER = (
    "The grass is green.",
    "The sky is blue.",
    "The sun is yellow.",
    "Here we go.",
    "There and back again.",
)
CHARS_PER_TOKEN_GUESS = 4.0  # only the first guess; the server's count decides


def filler_sentences(n: int) -> list[str]:
    return [FILLER[i % len(FILLER)] for i in range(n)]


def insert_at_depth(sentences: list[str], needle: str, depth: float) -> list[str]:
    """The needle placed after round(depth * n) filler sentences (0.0 = first, 1.0 = last)."""
    position = round(max(0.0, min(1.0, depth)) * len(sentences))
    return [*sentences[:position], needle, *sentences[position:]]


def first_guess(target_tokens: int) -> int:
    per_sentence = sum(len(s) + 1 for s in FILLER) / len(FILLER) / CHARS_PER_TOKEN_GUESS
    return max(1, int(target_tokens / per_sentence))


@dataclass
class Probe:
    units: int
    tokens: int | None  # None: the server refused the prompt (too long) or failed


@dataclass
class LengthSearch:
    target: int
    tolerance: int
    units: int | None = None  # the answer: the most units whose prompt is <= target
    tokens: int | None = None
    probes: list[Probe] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return self.tokens is not None and self.target - self.tolerance <= self.tokens <= self.target


async def search_length(
    measure: Callable[[int], Awaitable[int | None]],
    target: int,
    *,
    guess: int,
    tolerance: int,
    max_probes: int = 8,
) -> LengthSearch:
    """Find the number of units whose prompt is within [target - tolerance, target] tokens.

    `measure(units)` returns the server's prompt token count, or None when the prompt was
    refused (longer than the server takes). Token count grows monotonically with units."""
    search = LengthSearch(target=target, tolerance=tolerance)
    below: Probe | None = None  # best probe with tokens <= target
    above: Probe | None = None  # smallest probe with tokens > target (or refused)
    units = max(1, guess)
    for _ in range(max_probes):
        tokens = await measure(units)
        probe = Probe(units, tokens)
        search.probes.append(probe)
        if tokens is not None and tokens <= target:
            if below is None or units > below.units:
                below = probe
            if tokens >= target - tolerance:
                break
        elif above is None or units < above.units:
            above = probe
        following = _next_units(below, above, target, tolerance)
        if following is None or any(p.units == following for p in search.probes):
            break
        units = following
    if below is not None:
        search.units, search.tokens = below.units, below.tokens
    return search


def _next_units(below: Probe | None, above: Probe | None, target: int, tolerance: int) -> int | None:
    aim = target - tolerance / 2  # the middle of the accepted window
    known = [(p.units, p.tokens) for p in (below, above) if p is not None and p.tokens is not None]
    if below is not None and below.tokens:
        if above is not None and above.tokens is not None and above.units != below.units:
            rate = (above.tokens - below.tokens) / (above.units - below.units)
        else:
            rate = below.tokens / below.units  # through the origin: slightly high, fine for a step
        step = round(below.units + (aim - below.tokens) / max(rate, 1e-9))
    elif known:  # only an over-long probe with a count: scale down
        known_units, known_tokens = known[0]
        step = round(known_units * aim / known_tokens)
    elif above is not None:  # refused without a count: halve
        step = above.units // 2
    else:
        return None
    low = below.units + 1 if below is not None else 1
    high = above.units - 1 if above is not None else None
    if high is not None and high < low:
        return None  # bracket closed: below is the best there is
    if step < low or (high is not None and step > high):
        step = (low + high) // 2 if high is not None else low * 2
    return max(1, step)
