"""plan-memory's advice on mem-fraction-static is a fraction of the card's memory: where the
weights alone are more than the card has (an H200 profile on an RTX 5090), no fraction above
1.0 is advised; the advice says a bigger card or more cards is needed."""

from __future__ import annotations

import re

from deploytool.memory.profile_plan import plan_memory_command
from deploytool.memory.request import PlanMemoryRequest
from deploytool.profiles import ProfileStore

CARDS = ("rtx5090", "rtx-pro-6000", "h200", "b300", "gb300")


def test_no_card_is_advised_a_fraction_above_one() -> None:
    plan = plan_memory_command(PlanMemoryRequest.from_options("h200-qwen3.6-35b-a3b-fp8", card="rtx5090"))
    refusal = next(n for n in plan.startup if n["flag"] == "--mem-fraction-static")
    assert "more cards (tp-size)" in refusal["fix"] and "raise mem-fraction-static" not in refusal["fix"], (
        refusal
    )
    advised = []
    for profile in ProfileStore().all():
        if profile.is_simulator or profile.abstract:
            continue
        for card in CARDS:
            for note in plan_memory_command(PlanMemoryRequest.from_options(profile.name, card=card)).startup:
                advised += [
                    (profile.name, card, float(x)) for x in re.findall(r"above about ([0-9.]+)", note["fix"])
                ]
    assert [a for a in advised if a[2] >= 1.0] == [], advised
