"""How two cards are joined, in NVML's terms: the rules that both the NVML reader (topology.py)
and the stand-in NVML (nvml_standin.py) apply, so a described host is counted as a real one is."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def p2p_index(value: Any) -> int:
    """pynvml spells NVML_P2P_CAPS_INDEX_READ `= 0,` (a one-element tuple); the index is 0."""
    return int(value[0]) if isinstance(value, tuple) else int(value)


def nvlinks_between(
    a_ends: Sequence[tuple[str | None, str | None]],
    b_ends: Sequence[tuple[str | None, str | None]],
    b_bus_id: str | None,
) -> int:
    """nvidia-smi's NV# between cards a and b, from the far end of each active link of each card
    ("gpu" or "switch", and its PCI bus id): a's links straight to b, plus, when both reach the
    same NVSwitches, the fewer of their switch links (every switch port reaches every card)."""
    direct = sum(1 for kind, bus in a_ends if kind == "gpu" and b_bus_id is not None and bus == b_bus_id)
    switch_a = [bus for kind, bus in a_ends if kind == "switch"]
    switch_b = [bus for kind, bus in b_ends if kind == "switch"]
    if set(switch_a) & set(switch_b):
        direct += min(len(switch_a), len(switch_b))
    return direct
