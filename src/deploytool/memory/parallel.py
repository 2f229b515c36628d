"""The parallel sizes against the plan's cards: SGLang places tp x pp ranks per data-parallel
replica, one GPU each (managers/data_parallel_controller.py: each replica's base GPU id moves
on by tp_size x pp_size), so a launch needs tp x pp x dp cards; with --enable-dp-attention the
replicas share the tensor-parallel group's cards (dp must divide tp). Expert parallelism has no
cards of its own: its ranks are the tensor-parallel ranks (the MoE EP rank is derived from the
TP rank), so ep-size must divide tp-size. A launch that asks for more cards than the plan has
dies with an invalid device ordinal once its scheduler reaches the missing GPU."""

from __future__ import annotations

from .cards import Card
from .inputs import PlanInputs


def cards_needed(inputs: PlanInputs) -> int:
    tp, pp, dp = max(1, inputs.tp_size), max(1, inputs.pp_size), max(1, inputs.dp_size)
    return tp * pp * (1 if inputs.enable_dp_attention else dp)


def parallel_problems(inputs: PlanInputs, card: Card) -> list[str]:
    """Why these parallel sizes cannot run on the plan's cards ([]: they can)."""
    tp, pp, dp, ep = (
        max(1, inputs.tp_size),
        max(1, inputs.pp_size),
        max(1, inputs.dp_size),
        max(1, inputs.ep_size),
    )
    problems = []
    if inputs.enable_dp_attention and tp % dp:
        problems.append(
            f"dp-size {dp} with --enable-dp-attention must divide tp-size {tp} (the replicas share "
            "the tensor-parallel group's cards)"
        )
    if ep > 1 and tp % ep:
        problems.append(
            f"ep-size {ep} must divide tp-size {tp}: the expert-parallel ranks are the tensor-parallel "
            "ranks, with no cards of their own"
        )
    need = cards_needed(inputs)
    if need > card.count:
        sizes = f"tp-size {tp} x pp-size {pp}" + ("" if inputs.enable_dp_attention else f" x dp-size {dp}")
        have = f"{card.count} x {card.name}" + (f" ({card.source})" if card.source else "")
        problems.append(
            f"{sizes} = {need} GPUs, and the plan has {have}: SGLang would die with an invalid device "
            f"ordinal; plan for {need} cards (--card NAME:{need}, --gpu UUID,UUID,..., a slot of "
            f"{need} cards) or lower the parallel sizes"
        )
    return problems
