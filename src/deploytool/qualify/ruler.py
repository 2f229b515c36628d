"""RULER's needle-in-a-haystack tasks (NVIDIA/RULER, scripts/data/synthetic/niah.py and
scripts/synthetic.yaml), built on generated prose (qualify/prose.py), scored with RULER's
`string_match_all` (scripts/eval/synthetic/constants.py): the share of expected values that
appear in the answer, case-insensitive.

Template (RULER `niah`, chat form without the base-model answer prefix):
    Some special magic {numbers} are hidden within the following text. Make sure to memorize
    it. I will quiz you about the {numbers} afterwards.\\n{context}\\nWhat are all the special
    magic {numbers} for {query} mentioned in the provided text?
with RULER's singular rewrite when one value is asked for ("A special magic number is hidden
...", "What is the special magic number for ..."). Needle: "One of the special magic {numbers}
for {key} is: {value}." Keys are RULER-style adjective-noun words; values 7-digit numbers or
UUIDs. Variants (RULER's names): single (niah_single_2/3), multikey (niah_multikey_1: the key
asked plus three distractor keys), multivalue (niah_multivalue: four values of one key),
multiquery (niah_multiquery: four keys asked at once).
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from typing import Literal

ADJECTIVES = (
    "amber",
    "quiet",
    "northern",
    "hollow",
    "silver",
    "crooked",
    "distant",
    "gentle",
    "rapid",
    "frozen",
    "bitter",
    "golden",
    "hidden",
    "narrow",
    "patient",
    "restless",
    "scarlet",
    "tender",
    "velvet",
    "wild",
)
NOUNS = (
    "harbor",
    "lantern",
    "orchard",
    "meadow",
    "compass",
    "glacier",
    "violin",
    "canyon",
    "ledger",
    "falcon",
    "anchor",
    "beacon",
    "cellar",
    "dagger",
    "ember",
    "feather",
    "garnet",
    "hammock",
    "island",
    "jasmine",
)

Variant = Literal["single-number", "single-uuid", "multikey", "multivalue", "multiquery"]
# variant -> (keys in the haystack, values per key, keys asked, value type)
VARIANTS: dict[Variant, tuple[int, int, int, str]] = {
    "single-number": (1, 1, 1, "numbers"),
    "single-uuid": (1, 1, 1, "uuids"),
    "multikey": (4, 1, 1, "numbers"),
    "multivalue": (1, 4, 1, "numbers"),
    "multiquery": (4, 1, 4, "numbers"),
}
TEMPLATE = (
    "Some special magic {type_v} are hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the {type_v} afterwards.\n{context}\n"
    "What are all the special magic {type_v} for {query} mentioned in the provided text?"
)
NEEDLE = "One of the special magic {type_v} for {key} is: {value}."


@dataclass
class Sample:
    variant: Variant
    prompt: str
    answers: list[str]
    depth: float  # where the first asked needle sits


def _value(rng: random.Random, kind: str) -> str:
    if kind == "uuids":
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))
    return str(rng.randint(1_000_000, 9_999_999))


def build(
    variant: Variant, haystack: list[str], depth: float, rng: random.Random, opening: str = ""
) -> Sample:
    """One RULER sample: the needles placed in `haystack` (sentences), the asked key's first
    needle at `depth`, the others at random depths; RULER's template around it."""
    n_keys, n_values, n_query, kind = VARIANTS[variant]
    words = rng.sample([f"{a}-{n}" for a in ADJECTIVES for n in NOUNS], n_keys)
    needles: list[tuple[str, str]] = []  # (key, sentence)
    values: dict[str, list[str]] = {}
    for key in words:
        for _ in range(n_values):
            value = _value(rng, kind)
            values.setdefault(key, []).append(value)
            needles.append((key, NEEDLE.format(type_v=kind, key=key, value=value)))
    asked = words[:n_query]
    n = len(haystack)
    first = needles.index(next(nd for nd in needles if nd[0] == asked[0]))
    positions = [round(depth * n) if i == first else rng.randrange(n + 1) for i in range(len(needles))]
    sentences = list(haystack)
    for position, (_, text) in sorted(zip(positions, needles, strict=True), key=lambda p: p[0], reverse=True):
        sentences.insert(position, text)
    query = asked[0] if len(asked) == 1 else ", ".join(asked[:-1]) + ", and " + asked[-1]
    template, type_v = TEMPLATE, kind
    if n_query * n_values == 1:  # RULER's singular rewrite
        template = template.replace("Some", "A").replace("are all", "is").replace("are", "is")
        type_v = kind[:-1]
    prompt = opening + template.format(type_v=type_v, context=" ".join(sentences), query=query)
    return Sample(
        variant=variant, prompt=prompt, answers=[v for key in asked for v in values[key]], depth=depth
    )


def string_match_all(answer: str, expected: list[str]) -> float:
    """RULER's string_match_all for one sample: share of expected values found (0..1)."""
    text = (answer or "").lower()
    return sum(1.0 for value in expected if value.lower() in text) / len(expected)
