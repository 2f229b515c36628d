"""Which machine and card each start of a search ran on, and what to say when one search's
figures come from more than one.

A search resumed from its journal may go on on another host (a lent GPU is seldom the same one
twice), and two cards of one model differ by more than a launch flag's worth on some workloads.
A ratio between candidates measured on different machines carries that difference, and tune
cannot take it out; it can say so, and name what was measured where.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..host.slots import Slot
    from ..profiles import Profile

NOT_RECORDED = "not recorded"  # a journal written before starts named their machine


def machine_id(profile: Profile, slot: Slot | None, nvml: Any = None) -> str:
    """The host's name and the card(s) a candidate's server uses: the slot's UUIDs, or for a
    local process the cards CUDA_VISIBLE_DEVICES leaves it (all of them when unset)."""
    host = socket.gethostname() or "unnamed host"
    if profile.is_simulator or (slot is not None and slot.is_cpu):
        return f"{host} (CPU, reference runtime)" if profile.is_simulator else f"{host} (CPU)"
    # the server's process gets the profile's own environment over this one (tune/local.py)
    visible = {**os.environ, **profile.server.env}.get("CUDA_VISIBLE_DEVICES")
    uuids = list(slot.gpus) if slot is not None else visible_uuids(visible, nvml)
    return f"{host} {','.join(uuids)}" if uuids else f"{host} (no card read)"


def visible_uuids(visible: str | None, nvml: Any = None) -> list[str]:
    """The UUIDs of the cards a CUDA process would see: CUDA_VISIBLE_DEVICES lists indices or
    UUIDs (a prefix is enough, as CUDA takes it); unset, every card NVML reads. Indices are read
    in NVML's order, which is CUDA's under CUDA_DEVICE_ORDER=PCI_BUS_ID; CUDA's default
    (fastest first) can differ on a host of mixed cards. A MIG instance is kept as written."""
    from ..host.gpu_live import read_cards

    cards = read_cards(nvml).cards
    if visible is None:
        return [c.uuid for c in cards]
    chosen: list[str] = []
    for item in (x.strip() for x in visible.split(",")):
        if not item:
            continue
        if item.startswith("MIG-"):
            chosen.append(item)
            continue
        if item.isdigit():
            matches = [c.uuid for c in cards if c.index == int(item)]
        else:
            matches = [c.uuid for c in cards if c.uuid.startswith(item)]
        # CUDA stops at the first entry it cannot resolve (an ambiguous prefix included), and so
        # does this list
        if len(matches) != 1:
            break
        chosen.append(matches[0])
    return chosen


def machines_note(results: list[Any]) -> str | None:
    """When the measured starts ran on more than one machine: which candidates ran where."""
    where: dict[str, list[str]] = {}
    for r in results:
        for s in r.starts:
            if s.error:
                continue
            ids = where.setdefault(s.machine or NOT_RECORDED, [])
            if r.id not in ids:
                ids.append(r.id)
    recorded = [m for m in where if m != NOT_RECORDED]
    if len(recorded) < 2 and not (recorded and NOT_RECORDED in where):
        return None
    parts = "; ".join(f"{', '.join(ids)} on {machine}" for machine, ids in where.items())
    advice = "measure the ones that matter again in one run (a space of just those values)"
    if len(recorded) < 2:  # a journal from before starts named their machine, resumed here
        return (
            f"some starts did not record their machine ({parts}): if they ran on another one, a ratio "
            f"between them and the rest carries the machines' difference as well as the flags'; {advice}"
        )
    return (
        f"the candidates were measured on {len(recorded)} machines ({parts}): a ratio between candidates "
        f"measured on different machines carries the machines' difference as well as the flags'; {advice}"
    )
