"""Scoring helpers: GSM8K answer extraction and confidence intervals.

Two extractions, reported side by side (as lm-evaluation-harness does for GSM8K):
  * strict: only an answer written in the few-shot format, `#### N`;
  * flexible: an explicit final-answer marker (`#### N`, `\\boxed{N}`, "the answer is N",
    "Answer: N"), and only when there is none, the last number in the text.
Numbers are compared as exact decimals after removing `$`, thousands separators and trailing
zeros, so `$1,234.00` equals `1234`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

_NUMBER = r"-?\$?\s?\d[\d,]*(?:\.\d+)?|-?\$?\s?\.\d+"
_STRICT = re.compile(r"####\s*(" + _NUMBER + ")")
_BOXED = re.compile(r"\\boxed\s*\{\s*(?:\\text\{)?\s*(" + _NUMBER + r")")
_ANSWER_IS = re.compile(
    r"(?:final answer|the answer|answer)\s*(?:is|=|:)?\s*[:=]?\s*(?:\*\*)?\s*(?:\\\(|\$\$)?\s*("
    + _NUMBER
    + ")",
    re.IGNORECASE,
)
_ANY_NUMBER = re.compile(_NUMBER)


def normalize_number(text: str | None) -> str | None:
    """'$1,234.50' -> '1234.5', '18.00' -> '18', '-7' -> '-7'; None when not a number."""
    if text is None:
        return None
    cleaned = text.replace("$", "").replace(",", "").replace(" ", "").rstrip(".")
    if cleaned in ("", "-", "."):
        return None
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return None
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def extract_strict(text: str) -> str | None:
    """The number after the last `####` (the few-shot answer format), else None."""
    found = _STRICT.findall(text or "")
    return normalize_number(found[-1]) if found else None


def extract_flexible(text: str) -> str | None:
    """An explicit final answer when there is one, else the last number in the text."""
    text = text or ""
    for pattern in (_STRICT, _BOXED, _ANSWER_IS):
        found = pattern.findall(text)
        if found:
            return normalize_number(found[-1])
    numbers = _ANY_NUMBER.findall(text)
    for candidate in reversed(numbers):
        value = normalize_number(candidate)
        if value is not None:
            return value
    return None


def gold_answer(answer_field: str) -> str:
    """The reference answer of a GSM8K record: the number after `####`."""
    value = extract_strict(answer_field)
    if value is None:
        raise ValueError(f"GSM8K answer has no '#### N' line: {answer_field[-80:]!r}")
    return value


@dataclass(frozen=True)
class Interval:
    low: float
    high: float


def wilson_interval(successes: int, total: int, z: float = 1.959964) -> Interval:
    """Wilson score interval (95% by default); stays inside [0, 1] and behaves at 0% and 100%."""
    if total <= 0:
        return Interval(0.0, 1.0)
    p = successes / total
    denom = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denom
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denom
    return Interval(max(0.0, centre - half), min(1.0, centre + half))


def normal_interval(successes: int, total: int, z: float = 1.959964) -> Interval:
    """Normal-approximation (Wald) interval, clipped to [0, 1]; for comparison with other tools."""
    if total <= 0:
        return Interval(0.0, 1.0)
    p = successes / total
    half = z * math.sqrt(p * (1 - p) / total)
    return Interval(max(0.0, p - half), min(1.0, p + half))


def missing_keyword_groups(text: str, groups: list[list[str]]) -> list[list[str]]:
    """The keyword groups that do NOT match `text`. A group matches when ANY of its words occurs
    as a whole word (case-insensitive); the answer passes only when EVERY group matches."""
    lowered = (text or "").lower()
    missing = []
    for group in groups:
        if not any(re.search(rf"(?<![\w]){re.escape(str(word).lower())}(?![\w])", lowered) for word in group):
            missing.append(list(group))
    return missing


def lacking(groups: list[list[str]]) -> str:
    """Missing keyword groups as a problem names them: "one of ['a'] and one of ['b']"."""
    return " and ".join("one of " + repr(g) for g in groups)


def answer_lacks(text: str, groups: list[list[str]]) -> str | None:
    """The problem of an answer that misses a keyword group (every missing group named, and the
    answer's start), or None when every group matches."""
    missing = missing_keyword_groups(text, groups)
    return f"answer lacks {lacking(missing)}: {(text or '')[:160]!r}" if missing else None
