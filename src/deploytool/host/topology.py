"""How every two cards are connected: NVML's common ancestor in the PCIe tree, the NVLinks
between them, and peer-to-peer support; and the matrix `deploytool gpus` prints, in the words
and abbreviations of `nvidia-smi topo -m`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .links import nvlinks_between as _count_nvlinks
from .links import p2p_index
from .nvml import optional as _optional

# NVML_TOPOLOGY_* -> (name in JSON, nvidia-smi's abbreviation, what it means). A pair on one
# board has no abbreviation of its own in nvidia-smi's legend; BRD says it.
LEVELS: dict[int, tuple[str, str, str]] = {
    0: ("internal", "BRD", "on one board"),
    10: ("single", "PIX", "through at most one PCIe switch"),
    20: ("multiple", "PXB", "through several PCIe switches, not through the host bridge"),
    30: ("hostbridge", "PHB", "through a PCIe host bridge (typically the CPU)"),
    40: ("node", "NODE", "through the interconnect between PCIe host bridges within one NUMA node"),
    50: ("system", "SYS", "through the interconnect between NUMA nodes (QPI/UPI, or between Grace CPUs)"),
}
# How close a connection is, for choosing which cards work together: NVLink first.
RANK = {
    "nvlink": 0,
    "internal": 1,
    "single": 2,
    "multiple": 3,
    "hostbridge": 4,
    "node": 5,
    "system": 6,
    None: 7,
}
# NVML_P2P_STATUS_* -> (name in JSON, nvidia-smi topo -p2p's abbreviation)
P2P_STATUS: dict[int, tuple[str, str]] = {
    0: ("ok", "OK"),
    1: ("chipset not supported", "CNS"),
    2: ("GPU not supported", "GNS"),
    3: ("topology not supported", "TNS"),
    4: ("disabled by registry key", "DR"),
    5: ("not supported", "NS"),
    6: ("unknown", "U"),
}
P2P_KINDS = ("read", "write", "nvlink", "atomics")


@dataclass
class GpuPair:
    a: int  # card indexes, a < b
    b: int
    level: str | None  # NVML's common ancestor: internal, single, multiple, hostbridge, node, system
    nvlinks: int = 0  # NVLinks between them: direct, or each card's links into one NVSwitch domain
    p2p: dict[str, str | None] = field(default_factory=dict)  # read/write/nvlink/atomics -> status
    label: str = ""  # nvidia-smi topo -m's cell: NV# when NVLinks join them, else the PCIe path

    def __post_init__(self) -> None:
        self.label = f"NV{self.nvlinks}" if self.nvlinks else _pcie_label(self)

    @property
    def rank(self) -> int:
        return RANK["nvlink"] if self.nvlinks else RANK.get(self.level, RANK[None])

    @property
    def crosses_numa(self) -> bool:
        return self.level == "system"

    def p2p_text(self) -> str:
        abbreviations = dict(P2P_STATUS.values())
        return "/".join(abbreviations.get(self.p2p.get(kind) or "", "?") for kind in P2P_KINDS)


def read_pairs(nvml: Any, handles: list[Any], cards: list[Any]) -> list[GpuPair]:
    """Every two cards (MIG devices have no place of their own: their card's is theirs)."""
    indexes = {name: getattr(nvml, f"NVML_P2P_CAPS_INDEX_{name.upper()}", None) for name in P2P_KINDS}
    pairs = []
    for i in range(len(handles)):
        for j in range(i + 1, len(handles)):
            level = _optional(
                lambda a, b: nvml.nvmlDeviceGetTopologyCommonAncestor(a, b), handles[i], handles[j]
            )
            p2p: dict[str, str | None] = {}
            for kind, index in indexes.items():
                if index is None:
                    continue
                status = _optional(
                    lambda a, b, k: nvml.nvmlDeviceGetP2PStatus(a, b, p2p_index(k)),
                    handles[i],
                    handles[j],
                    index,
                )
                p2p[kind] = P2P_STATUS.get(status, ("unknown", "U"))[0] if status is not None else None
            pairs.append(
                GpuPair(
                    a=i,
                    b=j,
                    level=LEVELS[level][0] if level in LEVELS else None,
                    nvlinks=nvlinks_between(cards[i], cards[j]),
                    p2p=p2p,
                )
            )
    return pairs


def nvlinks_between(a: Any, b: Any) -> int:
    """NV# between two inventory cards (links.nvlinks_between over their active links)."""

    def far_ends(card: Any) -> list[tuple[str | None, str | None]]:
        return [(link.remote, link.remote_bus_id) for link in card.nvlinks or [] if link.active]

    return _count_nvlinks(far_ends(a), far_ends(b), b.pci_bus_id)


def matrix_lines(inventory: Any) -> list[str]:
    """The `nvidia-smi topo -m` matrix of the cards, then a legend of the labels it uses; where
    NVLink joins cards, a second matrix shows the PCIe path beneath it."""
    cards = inventory.gpus
    if not cards:
        return []
    lines = _matrix(inventory, lambda p: p.label, affinity=True)
    used = {p.label if not p.nvlinks else "NV#" for p in inventory.pairs}
    if any(p.nvlinks for p in inventory.pairs):
        lines += ["", "PCIe beneath the NVLinks:", *_matrix(inventory, _pcie_label, affinity=False)]
        used |= {_pcie_label(p) for p in inventory.pairs}
    lines += ["", "Legend:", "  X    = Self"]
    for _name, abbr, meaning in LEVELS.values():
        if abbr in used:
            lines.append(f"  {abbr:<4} = connection {meaning}")
    if "NV#" in used:
        lines.append("  NV#  = connection through a bonded set of # NVLinks (directly or through NVSwitches)")
    return lines


def _pcie_label(pair: GpuPair) -> str:
    return next((abbr for name, abbr, _ in LEVELS.values() if name == pair.level), "?")


def _matrix(inventory: Any, label: Any, *, affinity: bool) -> list[str]:
    cards = inventory.gpus
    names = [f"GPU{g.index}" for g in cards]
    width = max([6] + [len(n) + 2 for n in names] + [len(label(p)) + 2 for p in inventory.pairs])
    lines = [
        " " * 8
        + "".join(n.ljust(width) for n in names)
        + ("CPU Affinity    NUMA Affinity   GPU NUMA ID" if affinity else "")
    ]
    for g in cards:
        cells = []
        for other in cards:
            pair = inventory.pair(g.index, other.index) if other.index != g.index else None
            cells.append("X" if other.index == g.index else label(pair) if pair else "?")
        tail = f"{g.cpu_affinity or 'N/A':<16}{_na(g.numa_node):<16}{_na(g.gpu_numa_id)}" if affinity else ""
        lines.append(f"GPU{g.index}".ljust(8) + "".join(c.ljust(width) for c in cells) + tail)
    return [line.rstrip() for line in lines]


def p2p_lines(inventory: Any) -> list[str]:
    """Peer-to-peer per pair, as nvidia-smi topo -p2p abbreviates it, pairs alike grouped."""
    if not inventory.pairs:
        return []
    out = ["Peer to peer (read/write/NVLink/atomics): " + _grouped(inventory.pairs, lambda p: p.p2p_text())]
    used = {abbr for p in inventory.pairs for abbr in p.p2p_text().split("/")}
    out.append("  " + ", ".join(f"{abbr} = {name}" for name, abbr in P2P_STATUS.values() if abbr in used))
    return out


def _grouped(pairs: list[GpuPair], key: Any) -> str:
    groups: dict[str, list[str]] = {}
    for p in pairs:
        groups.setdefault(key(p), []).append(f"GPU{p.a}-GPU{p.b}")
    if len(groups) == 1 and len(pairs) > 1:
        return f"{next(iter(groups))} between every two cards"
    return "; ".join(f"{value} {', '.join(names)}" for value, names in groups.items())


def _na(value: Any) -> str:
    return "N/A" if value is None else str(value)
