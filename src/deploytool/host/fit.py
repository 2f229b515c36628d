"""Which profiles fit which cards: every requirement a set of cards fails, not only the first."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # the profile schema (pydantic) is not needed to import this module
    from ..profiles import Profile
    from .gpus import GpuInfo, Inventory

Verdict = Literal["runnable", "runnable-with-less-memory", "incompatible"]
VERDICT_ORDER = ("runnable", "runnable-with-less-memory", "incompatible")


@dataclass
class Fit:
    profile: str
    verdict: Verdict
    reasons: list[str]


def classify(profile: Profile, gpus: list[GpuInfo]) -> Fit:
    """Can this profile run on these cards? Compute capability, GPU count and a card in MIG mode
    are hard limits (kernels are built per architecture; tensor parallelism needs the cards;
    CUDA sees a MIG card's devices, not the card); less memory than the profile wants may still
    run with a shorter context or a smaller KV pool. Every failed requirement is listed."""
    match = profile.match
    if profile.is_simulator:
        return Fit(profile.name, "runnable", ["the simulator needs no GPU"])
    hard = [f"needs {match.gpu_count} GPUs, the slot has {len(gpus)}"] if len(gpus) < match.gpu_count else []
    hard += [f"{text} ({cards})" for text, cards in _grouped(gpus, lambda g: card_problems(profile, g))]
    soft = [f"{text} ({cards})" for text, cards in _grouped(gpus, lambda g: card_shortfalls(profile, g))]
    if hard:
        return Fit(profile.name, "incompatible", hard + soft)
    verdict: Verdict = (
        "runnable-with-less-memory" if any(_short_of_memory(profile, g) for g in gpus) else "runnable"
    )
    if match.gpu_count < len(gpus):
        soft.append(f"uses {match.gpu_count} of the slot's {len(gpus)} GPUs")
    return Fit(profile.name, verdict, soft or ["name, compute capability, memory and GPU count match"])


def card_problems(profile: Profile, gpu: GpuInfo) -> list[str]:
    """What rules this one card out for the profile, whatever the other cards."""
    match, out = profile.match, []
    if match.compute_capability and gpu.compute_capability != match.compute_capability:
        out.append(
            f"{gpu.name} is compute capability {gpu.compute_capability}, the profile's kernels need "
            f"{match.compute_capability}"
        )
    if gpu.mig_mode:
        out.append(
            f"{gpu.name} is in MIG mode: CUDA sees its {len(gpu.mig_devices)} MIG device(s), not the card; "
            "give a MIG device's UUID, or turn MIG off"
        )
    return out


def card_shortfalls(profile: Profile, gpu: GpuInfo) -> list[str]:
    """What the profile would rather have of this card: its name (another card of the same
    architecture), its memory."""
    match, out = profile.match, []
    same_architecture = not match.compute_capability or gpu.compute_capability == match.compute_capability
    if match.gpu_name and gpu.name not in match.gpu_name and same_architecture:
        out.append(f"{gpu.name} is not one of {', '.join(match.gpu_name)} (same architecture)")
    if _short_of_memory(profile, gpu):
        out.append(
            f"{gpu.mig_name or gpu.name} has {gpu.memory_total_gib:.0f} GiB, the profile wants "
            f"{match.min_memory_gib:g} GiB"
        )
    return out


def _short_of_memory(profile: Profile, gpu: GpuInfo) -> bool:
    wanted = profile.match.min_memory_gib
    if not wanted or gpu.memory_total_gib is None:
        return False
    return gpu.memory_total_gib < wanted


def _grouped(gpus: list[GpuInfo], problems: Callable[[GpuInfo], list[str]]) -> list[tuple[str, str]]:
    """One line per distinct problem, naming the cards that have it: eight alike cards give one
    reason, not eight."""
    found: dict[str, list[str]] = {}
    for gpu in gpus:
        for text in problems(gpu):
            if gpu.label not in found.setdefault(text, []):
                found[text].append(gpu.label)
    return [(text, ", ".join(cards)) for text, cards in found.items()]


def annotate_matches(inventory: Inventory, profiles: list[Profile]) -> Inventory:
    """Fill each card's `matching_profiles`: profiles made for this card (by name and compute
    capability), whatever their GPU count."""
    for gpu in inventory.gpus:
        gpu.matching_profiles = [
            p.name
            for p in profiles
            if not p.is_simulator
            and p.match.gpu_name
            and gpu.name in p.match.gpu_name
            and (p.match.compute_capability in (None, gpu.compute_capability))
        ]
    return inventory
