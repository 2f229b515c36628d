"""Slots from cards: the host's cards grouped into slots of a profile's GPU count.

A one-card profile gets one slot per card (and one per MIG device of a card in MIG mode). A
profile that spans N cards (tensor parallelism) gets groups of N, the closest-connected first:
NVLink, then one PCIe switch, several switches, one host bridge, one NUMA node. A group in
which two cards could only talk across the NUMA interconnect (SYS, no NVLink) is refused and
said so: every tensor-parallel step would cross the CPUs' link. A group joined by NVLink may
span NUMA nodes (an 8-card board across two sockets): its traffic stays on NVLink, and the
slot says it spans them.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..host.fit import Fit, card_problems, card_shortfalls, classify
from .slots import Slot

if TYPE_CHECKING:
    from ..host.gpus import GpuInfo, Inventory
    from ..profiles import Profile

_MAX_COMBINATIONS = 200_000  # beyond this many candidate groups, cards are taken in index order


@dataclass
class OfferedSlot:
    name: str  # the slot's name, as `up` and `status` show it
    cards: list[str]  # GPU0, GPU1, ... (or "MIG device of GPU0")
    uuids: list[str]
    link: str  # the weakest connection between its cards, as nvidia-smi labels it ("-" for one card)
    numa_nodes: list[int]
    verdict: str
    reasons: list[str]
    notes: list[str] = field(default_factory=list)
    pcie: list[str] = field(default_factory=list)  # each card's PCIe link
    power_limit_w: list[float | None] = field(default_factory=list)

    @property
    def gpu_flags(self) -> str:
        return " ".join(f"--gpu {u}" for u in self.uuids)


@dataclass
class RefusedGroup:
    cards: list[str]
    reasons: list[str]


@dataclass
class SlotPlan:
    profile: str
    gpu_count: int
    slots: list[OfferedSlot] = field(default_factory=list)
    refused: list[RefusedGroup] = field(default_factory=list)
    unused: list[dict[str, str]] = field(default_factory=list)  # {card, uuid, why}
    note: str | None = None

    def lines(self) -> list[str]:
        head = f"profile {self.profile}: {self.gpu_count} GPU(s) per slot; {len(self.slots)} slot(s) on this host"
        out = [head] + ([f"  {self.note}"] if self.note else [])
        for n, slot in enumerate(self.slots, 1):
            joined = f", {slot.link}" if len(slot.cards) > 1 else ""
            out.append(
                f"  slot {n}: {slot.name} = {' + '.join(slot.cards)}{joined}, NUMA "
                f"{'/'.join(map(str, slot.numa_nodes)) or '?'}: {slot.verdict}"
            )
            out += [f"      {reason}" for reason in slot.reasons]
            out += [f"      note: {note}" for note in slot.notes]
            out.append(f"      {slot.gpu_flags}")
        for group in self.refused:
            out.append(f"  refused: {' + '.join(group.cards)}")
            out += [f"      {reason}" for reason in group.reasons]
        for card in self.unused:
            out.append(f"  not used: {card['card']}: {card['why']}")
        return out


def plan_slots(profile: Profile, inventory: Inventory) -> SlotPlan:
    count = profile.match.gpu_count
    plan = SlotPlan(profile=profile.name, gpu_count=0 if profile.is_simulator else count)
    if profile.is_simulator:
        plan.note = "the reference runtime runs on CPU slots (--cpu, --cpu-slot NAME), not on cards"
        return plan
    units: list[GpuInfo] = []
    for card in inventory.gpus:
        if card.mig_mode and count > 1:
            problems = [p for p in card_problems(profile, card) if "MIG mode" not in p]
            plan.unused.append(
                _unused(
                    card,
                    "; ".join(
                        [
                            *problems,
                            f"in MIG mode: tensor parallelism does not span MIG devices (its {len(card.mig_devices)} MIG "
                            "device(s) serve one-card profiles)",
                        ]
                    ),
                )
            )
            continue
        if card.mig_mode and not card.mig_devices:
            plan.unused.append(_unused(card, "in MIG mode with no MIG device made yet"))
            continue
        for unit in card.mig_views() if card.mig_mode else [card]:
            problems = card_problems(profile, unit)
            if problems:
                # what else this card lacks too, so a user fixing the first reason is not met by the next
                plan.unused.append(_unused(unit, "; ".join(problems + card_shortfalls(profile, unit))))
            else:
                units.append(unit)
    if count > 1 and len(inventory.gpus) < count:
        plan.note = f"a slot needs {count} GPUs; this host has {len(inventory.gpus)}"
    if count == 1:
        plan.slots = [_offer(profile, [unit], inventory) for unit in units]
        return plan
    remaining = list(units)
    while len(remaining) >= count:
        group, refusal = _best_group(remaining, count, inventory)
        if group is None:
            plan.refused.append(RefusedGroup(cards=[c.label for c in refusal[0]], reasons=refusal[1]))
            break
        plan.slots.append(_offer(profile, group, inventory))
        remaining = [c for c in remaining if c not in group]
    refused = {label for group in plan.refused for label in group.cards}
    for card in remaining:
        plan.unused.append(
            _unused(
                card,
                "in the refused group above"
                if card.label in refused
                else f"left over: {len(units)} usable card(s) make {len(plan.slots)} slot(s) of {count}",
            )
        )
    return plan


def group_problems(cards: list[GpuInfo], inventory: Inventory) -> tuple[list[str], list[str]]:
    """(refusals, notes) of working together for a set of cards: a pair that could only talk
    across NUMA nodes is a refusal; a pair without peer-to-peer, or NUMA nodes spanned over
    NVLink, is a note."""
    refusals, notes = [], []
    for a, b in itertools.combinations(cards, 2):
        pair = inventory.pair(a.index, b.index) if a.index != b.index else None
        if pair is None:
            continue
        if pair.crosses_numa and not pair.nvlinks:
            refusals.append(
                f"{a.label} and {b.label} are on NUMA nodes {a.numa_node} and {b.numa_node} with no "
                "NVLink between them (SYS): every tensor-parallel step would cross the CPUs' interconnect"
            )
        read = pair.p2p.get("read")
        if read not in (None, "ok"):
            notes.append(
                f"no peer-to-peer between {a.label} and {b.label} ({read}): NCCL passes tensors "
                "through host memory"
            )
    nodes = sorted({c.numa_node for c in cards if c.numa_node is not None})
    if len(nodes) > 1 and not refusals:
        notes.append(
            f"spans NUMA nodes {' and '.join(map(str, nodes))}; the cards talk over NVLink, so the "
            "tensor-parallel traffic does not cross the CPUs"
        )
    return refusals, notes


def _best_group(cards: list[GpuInfo], count: int, inventory: Inventory) -> tuple[list[GpuInfo] | None, Any]:
    """The closest-connected allowed group of `count` cards, ties to the lowest indexes; or
    (None, (the best refused group, why)) when every group is refused."""
    if math.comb(len(cards), count) > _MAX_COMBINATIONS:
        candidates: Any = [cards[:count]]
    else:
        candidates = itertools.combinations(cards, count)
    best, best_key, refused, refused_key = None, None, None, None
    for group in candidates:
        pairs = [inventory.pair(a.index, b.index) for a, b in itertools.combinations(group, 2)]
        ranks = [p.rank if p else 99 for p in pairs]
        key = (max(ranks), sum(ranks), [c.index for c in group])
        if group_problems(list(group), inventory)[0]:
            if refused_key is None or key < refused_key:
                refused, refused_key = list(group), key
            continue
        if best_key is None or key < best_key:
            best, best_key = list(group), key
    if best is not None:
        return best, None
    return None, (refused, group_problems(refused or [], inventory)[0])


def _offer(profile: Profile, cards: list[GpuInfo], inventory: Inventory) -> OfferedSlot:
    fit: Fit = classify(profile, cards)
    _, notes = group_problems(cards, inventory)
    pairs = [inventory.pair(a.index, b.index) for a, b in itertools.combinations(cards, 2)]
    weakest = max((p for p in pairs if p), key=lambda p: p.rank, default=None)
    uuids = [c.uuid for c in cards]
    return OfferedSlot(
        name=Slot(gpus=tuple(sorted(uuids))).name,
        cards=[c.label for c in cards],
        uuids=uuids,
        link=weakest.label if weakest else "-",
        numa_nodes=sorted({c.numa_node for c in cards if c.numa_node is not None}),
        verdict=fit.verdict,
        reasons=fit.reasons,
        notes=notes,
        pcie=[c.pcie_text() for c in cards],
        power_limit_w=[c.power_limit_w for c in cards],
    )


def _unused(card: GpuInfo, why: str) -> dict[str, str]:
    return {"card": f"{card.label} ({card.mig_name or card.name})", "uuid": card.uuid, "why": why}
