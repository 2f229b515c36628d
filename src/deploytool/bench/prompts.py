"""Prompts of a target length that no prefix cache can help with.

Each prompt opens with a unique random prefix (random hex first, then the run id, group and the
request's index), so two prompts differ from their first characters and a radix/prefix cache,
even one matching token by token, finds nothing to reuse; its
body is random common words, so even a cache keyed past the prefix sees nothing repeated.

Lengths are estimated with a word/punctuation count (`estimate_tokens`): common English words are
one token each in the usual BPE tokenizers, and exactly one under the sim's rule. The figures use
the server's own `usage.prompt_tokens`, so the estimate only sets the size, never a result.
"""

from __future__ import annotations

import random
import re
import secrets
from dataclasses import dataclass

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")

# Short, frequent words: one token each with a leading space in common tokenizers.
_WORDS = [
    "time",
    "year",
    "people",
    "way",
    "day",
    "man",
    "thing",
    "woman",
    "life",
    "child",
    "world",
    "school",
    "state",
    "family",
    "student",
    "group",
    "country",
    "problem",
    "hand",
    "part",
    "place",
    "case",
    "week",
    "company",
    "system",
    "program",
    "question",
    "work",
    "government",
    "number",
    "night",
    "point",
    "home",
    "water",
    "room",
    "mother",
    "area",
    "money",
    "story",
    "fact",
    "month",
    "lot",
    "right",
    "study",
    "book",
    "eye",
    "job",
    "word",
    "business",
    "issue",
    "side",
    "kind",
    "head",
    "house",
    "service",
    "friend",
    "father",
    "power",
    "hour",
    "game",
    "line",
    "end",
    "member",
    "law",
    "car",
    "city",
    "community",
    "name",
    "president",
    "team",
    "minute",
    "idea",
    "kid",
    "body",
    "information",
    "back",
    "parent",
    "face",
    "others",
    "level",
    "office",
    "door",
    "health",
    "person",
    "art",
    "war",
    "history",
    "party",
    "result",
    "change",
    "morning",
    "reason",
    "research",
    "girl",
    "guy",
    "moment",
    "air",
    "teacher",
    "force",
    "education",
    "foot",
    "boy",
    "age",
    "policy",
    "music",
    "market",
    "sense",
    "nation",
    "plan",
    "college",
    "interest",
    "death",
    "experience",
    "effect",
    "use",
    "class",
    "control",
    "care",
    "field",
    "development",
    "role",
    "effort",
    "rate",
    "heart",
    "drug",
    "show",
    "leader",
    "light",
    "voice",
    "wife",
    "police",
    "mind",
    "price",
    "report",
    "decision",
    "son",
    "view",
    "relationship",
    "town",
    "road",
    "arm",
    "difference",
    "value",
    "building",
    "action",
    "model",
    "season",
    "society",
    "tax",
    "director",
    "position",
    "player",
    "record",
    "paper",
    "space",
    "ground",
    "form",
    "event",
    "official",
    "matter",
    "center",
    "couple",
    "site",
    "project",
    "activity",
    "star",
    "table",
    "need",
    "court",
    "oil",
    "situation",
    "cost",
    "industry",
    "figure",
    "street",
    "image",
    "phone",
    "data",
    "picture",
    "practice",
    "piece",
    "land",
    "product",
    "doctor",
    "wall",
    "patient",
    "worker",
    "news",
    "test",
    "movie",
    "north",
    "love",
    "support",
    "technology",
    "step",
    "baby",
    "computer",
    "type",
    "attention",
    "film",
    "tree",
    "source",
    "organization",
    "hair",
    "window",
    "evidence",
    "population",
    "site",
    "range",
]

_CLOSING = "Now continue writing about these words at length."


def estimate_tokens(text: str) -> int:
    """Words and punctuation marks: the length estimate prompts are built to."""
    return len(_TOKEN_RE.findall(text))


@dataclass(frozen=True)
class Prompt:
    text: str
    estimated_tokens: int
    prefix: str  # the unique opening, recorded so uniqueness can be checked afterwards


class PromptFactory:
    """Makes the prompts of one run. `seed` makes them reproducible; the run id keeps two runs
    with the same seed from sharing prefixes on a server that still holds the first in cache."""

    def __init__(self, seed: int, run_id: str | None = None):
        self.seed = seed
        self.run_id = run_id or secrets.token_hex(4)
        self._rng = random.Random(seed)
        self._count = 0

    def make(self, target_tokens: int, label: str) -> Prompt:
        self._count += 1
        nonce = f"{self._rng.getrandbits(64):016x}"
        # The nonce comes first: a per-token radix cache (SGLang's) would reuse a shared opening
        # such as "[bench <run id> <group> #".
        prefix = f"[{nonce} bench {self.run_id} {label} #{self._count}]"
        used = estimate_tokens(prefix) + estimate_tokens(_CLOSING)
        body_words = max(0, target_tokens - used)
        body = " ".join(self._rng.choices(_WORDS, k=body_words))
        text = f"{prefix} {body} {_CLOSING}" if body else f"{prefix} {_CLOSING}"
        return Prompt(text=text, estimated_tokens=estimate_tokens(text), prefix=prefix)
