"""Generated prose for long-context haystacks: plain English sentences, never a repeated
filler loop, with no digits (nothing competes with a number needle) and none of the words a
needle uses ("special", "magic"). Written for deploytool from a small grammar, so there is no
licence question; a fresh seed gives a different text of the same kind.

RULER's own essay haystack (Paul Graham's essays) cannot be shipped; this stands in for it:
varied sentences a model must read past, unlike RULER's `noise` haystack of one repeated line.
"""

from __future__ import annotations

import random

SUBJECTS = (
    "the old harbor",
    "a quiet village",
    "the river",
    "the night market",
    "an elderly baker",
    "the mountain road",
    "a young cartographer",
    "the library",
    "the northern forest",
    "a travelling musician",
    "the lighthouse keeper",
    "the orchard",
    "a patient gardener",
    "the morning train",
    "the council",
    "a curious child",
    "the glassblower",
    "the museum",
    "an apprentice carpenter",
    "the weather",
    "the ferry",
    "a retired sailor",
    "the bell tower",
    "the fishing fleet",
    "a stubborn goat",
    "the schoolteacher",
    "the vineyard",
    "the copper mine",
    "the canal",
    "a wandering poet",
    "the clockmaker",
    "the meadow",
    "the bridge",
    "the weaver",
    "the stone quarry",
)
VERBS = (
    "remembers",
    "watches over",
    "gathers",
    "repairs",
    "follows",
    "describes",
    "carries",
    "waits for",
    "celebrates",
    "measures",
    "guards",
    "paints",
    "collects",
    "questions",
    "shelters",
    "studies",
    "ignores",
    "welcomes",
    "mends",
    "traces",
    "outlasts",
    "borrows",
    "returns",
    "sketches",
    "records",
)
OBJECTS = (
    "the long winter",
    "every passing stranger",
    "the faded maps",
    "a basket of pears",
    "the slow tide",
    "the first snowfall",
    "a box of letters",
    "the harvest songs",
    "the crooked fence",
    "the evening light",
    "a forgotten recipe",
    "the spring floods",
    "the lanterns along the pier",
    "a quarrel between neighbours",
    "the sound of distant bells",
    "the smell of fresh bread",
    "the shape of the hills",
    "an unfinished quilt",
    "the names of the stars",
    "a wooden boat",
    "the rumours from the capital",
    "the colour of the sea",
    "a bundle of firewood",
    "the path through the marsh",
    "the stories of the founders",
)
TAILS = (
    "before the sun rises",
    "while the town sleeps",
    "with great care",
    "as the seasons turn",
    "without saying a word",
    "long after the others have gone home",
    "whenever the wind changes",
    "as its grandparents once did",
    "in the shade of the chestnut trees",
    "despite the rain",
    "for reasons nobody quite recalls",
    "until the work is done",
    "on the edge of the valley",
    "with a patience that surprises visitors",
    "as if nothing else mattered",
    "in the last days of autumn",
)
CONNECTORS = (
    "Meanwhile,",
    "Later,",
    "Some say",
    "In those days,",
    "Every year,",
    "Even so,",
    "Not far away,",
    "At dusk,",
    "Once,",
    "Afterwards,",
)


def sentence(rng: random.Random) -> str:
    subject, verb, obj, tail = (
        rng.choice(SUBJECTS),
        rng.choice(VERBS),
        rng.choice(OBJECTS),
        rng.choice(TAILS),
    )
    if rng.random() < 0.3:
        return f"{rng.choice(CONNECTORS)} {subject} {verb} {obj} {tail}."
    return f"{subject[0].upper()}{subject[1:]} {verb} {obj} {tail}."


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [sentence(rng) for _ in range(n)]
