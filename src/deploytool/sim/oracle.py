"""The GSM8K answer key (--gsm8k-oracle): an answer key to test scoring pipelines, never a model.

For a GSM8K test question found in the last user message, the oracle answers
correctly for a fixed fraction ACCURACY of questions and gives the correct answer
+ 1 for the others. Which questions are right, and the wording, come from a hash
of the question text, so a question is always treated the same way.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from importlib import resources
from pathlib import Path

SEARCH_TAIL = 20_000
KEY_CHARS = 24  # the shortest question of the GSM8K test set is 73 characters normalised
_SPACE_RE = re.compile(r"\s+")
_QUOTES = str.maketrans({"’": "'", "‘": "'", "“": '"', "”": '"'})

# The answer formats, chosen by hash. Some put other numbers after the final answer on
# purpose: a scorer that takes "the last number" instead of the marked answer gets them wrong.
FORMATS = (
    "Simulator answer key (not a model).\n#### {n}",
    "The answer is {n}.",
    "The final answer is \\boxed{{{n}}}. (Answer key entry {entry} of {total}.)",
    "The answer is {money}. That is the total after all 3 steps.",
    "The answer is {n_commas}.",
)


def normalize(text: str) -> str:
    return _SPACE_RE.sub(" ", text.translate(_QUOTES)).strip().lower()


def _fraction(text: str, salt: str) -> float:
    digest = hashlib.sha256((salt + text).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass
class OracleAnswer:
    question: str
    correct: Decimal
    given: Decimal
    is_correct: bool
    text: str


class Gsm8kOracle:
    def __init__(self, questions: list[tuple[str, Decimal]], accuracy: float) -> None:
        self.accuracy = accuracy
        self._entries = [(normalize(q), q, a) for q, a in questions]
        # Each question indexed by its first KEY_CHARS characters (a question shorter than that
        # is searched for whole), so that finding one in a message is one dictionary look-up per
        # character of it rather than a scan of the message per question.
        self._by_key: dict[str, list[tuple[str, str, Decimal]]] = {}
        self._short: list[tuple[str, str, Decimal]] = []
        for entry in self._entries:
            if len(entry[0]) >= KEY_CHARS:
                self._by_key.setdefault(entry[0][:KEY_CHARS], []).append(entry)
            else:
                self._short.append(entry)

    @classmethod
    def load(cls, path: str | None, accuracy: float) -> Gsm8kOracle:
        source = Path(path) if path else resources.files("deploytool") / "data" / "gsm8k" / "test.jsonl"
        try:
            raw = source.read_text(encoding="utf-8")
        except (FileNotFoundError, OSError) as exc:
            raise ValueError(f"gsm8k_oracle: needs the GSM8K test set; cannot read {source}: {exc}") from None
        questions = []
        for line in raw.splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            final = row["answer"].rsplit("####", 1)[-1].strip().replace(",", "")
            try:
                questions.append((row["question"], Decimal(final)))
            except InvalidOperation:
                continue
        if not questions:
            raise ValueError(f"no GSM8K questions found in {source}")
        return cls(questions, accuracy)

    def find(self, message: str) -> tuple[str, Decimal] | None:
        """The test question that occurs LAST in the message (few-shot examples come before it).

        Only the message's last SEARCH_TAIL characters are searched: the question is at the
        end, and 1,319 scans of a 1 MB retrieval prompt would cost seconds. Of two questions that
        start at the same place, the longer is the one found."""
        haystack = normalize(message[-SEARCH_TAIL:])
        best: tuple[int, int, str, Decimal] | None = None
        for norm, original, answer in self._short:
            pos = haystack.rfind(norm)
            if pos >= 0 and (best is None or (pos, len(norm)) > best[:2]):
                best = (pos, len(norm), original, answer)
        # The indexed questions from the message's end backwards: the first place one starts is
        # the last place any does (1,319 scans of the 20,000 characters cost ~25 ms a request).
        by_key, stop = self._by_key, -1 if best is None else best[0] - 1
        for pos in range(len(haystack) - KEY_CHARS, stop, -1):
            entries = by_key.get(haystack[pos : pos + KEY_CHARS])
            if entries is None:
                continue
            for norm, original, answer in entries:
                if haystack.startswith(norm, pos) and (best is None or (pos, len(norm)) > best[:2]):
                    best = (pos, len(norm), original, answer)
            if best is not None and best[0] == pos:
                break
        return (best[2], best[3]) if best else None

    def answer(self, message: str) -> OracleAnswer | None:
        found = self.find(message)
        if found is None:
            return None
        question, correct = found
        is_correct = _fraction(normalize(question), "correct:") < self.accuracy
        given = correct if is_correct else correct + 1
        style = int(_fraction(normalize(question), "format:") * len(FORMATS))
        return OracleAnswer(question, correct, given, is_correct, render(style, given, len(self._entries)))


def render(style: int, n: Decimal, total: int) -> str:
    whole = n == n.to_integral_value()
    plain = str(int(n)) if whole else str(n)
    return FORMATS[style].format(
        n=plain,
        n_commas=f"{int(n):,}" if whole else plain,
        money=f"${plain}.00" if whole else f"${plain}",
        entry=1 + int(abs(n)) % max(total, 1),
        total=total,
    )
