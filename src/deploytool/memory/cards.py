"""The card a plan is made for: read through NVML, or named from a small table.

The table holds what a vendor's data sheet says (memory, bus width, memory clock as NVML reports
it, board power); a reading from NVML always wins over it. Bandwidth follows NVML's own
arithmetic: bus width (bits) / 8 x max memory clock (MHz) x 2 (double data rate), so an H200
reading 6016 bits x 3201 MHz gives 4.81 TB/s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import FieldError, ProfileError, UsageError
from ..host.gpus import GpuInfo
from ..profiles import Profile

GIB = 1 << 30
MIB = 1 << 20


@dataclass
class Card:
    name: str
    memory_bytes: int  # total, as NVML reports it
    free_bytes: int | None = None  # NVML's free memory at the time of reading (None: from the table)
    memory_bus_width_bits: int | None = None
    max_memory_clock_mhz: int | None = None
    power_limit_w: float | None = None
    count: int = 1  # cards the profile spans (tensor parallel), each like this one
    source: str = "table"  # "nvml" or "table"
    uuid: str | None = None
    compute_capability: str | None = None  # "9.0": SGLang refuses some KV dtypes below Blackwell

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB

    @property
    def bandwidth_bytes_per_s(self) -> float | None:
        if not self.memory_bus_width_bits or not self.max_memory_clock_mhz:
            return None
        return self.memory_bus_width_bits / 8 * self.max_memory_clock_mhz * 1e6 * 2

    @property
    def bandwidth_source(self) -> str:
        if self.bandwidth_bytes_per_s is None:
            return "unknown (NVML reports no bus width or memory clock)"
        origin = "NVML" if self.source == "nvml" else "data-sheet table"
        return (
            f"{origin}: {self.memory_bus_width_bits} bit / 8 x {self.max_memory_clock_mhz} MHz x 2 "
            f"= {self.bandwidth_bytes_per_s / 1e12:.2f} TB/s"
        )


# name -> (memory MiB as NVML reports it, bus bits, max memory clock MHz as NVML reports it, power W)
# RTX 5090 / RTX PRO 6000: 32,607 / 97,887 MiB as nvidia-smi shows them in public reports;
#   GDDR7 at 28 Gbps on 512 bits = 1792 GB/s, which NVML reports as 14001 MHz.
# H200: 141 GB HBM3e; 143771 MiB, 700 W, a 6016-bit bus and 3201 MHz read through NVML on a real
#   H200 (docs/measured/h200-gpus-memory-bus.json, docs/gpus.md).
# H100 (SXM, 80 GB HBM3): 81,559 MiB, a 5120-bit bus, 2619 MHz and 700 W read through NVML on a
#   lent card (docs/measured/h100-upper-edge/nvml.json): the data sheet's 3.35 TB/s.
# B300 / GB300: not read on a real card here. Memory: the nominal 288 GB (274,658 MiB); the
#   clock is the one that gives the vendor's 8 TB/s on an 8192-bit bus. Power: 1100 / 1400 W.
#   Plan with --gpu on the machine for NVML's own figures.
CARD_TABLE: dict[str, tuple[int, int, int, float]] = {
    "NVIDIA GeForce RTX 5090": (32607, 512, 14001, 575.0),
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": (97887, 512, 14001, 600.0),
    "NVIDIA H100 80GB HBM3": (81559, 5120, 2619, 700.0),
    "NVIDIA H200": (143771, 6016, 3201, 700.0),
    "NVIDIA B300 SXM6 AC": (274658, 8192, 3906, 1100.0),
    "NVIDIA GB300": (274658, 8192, 3906, 1400.0),
}
# the architecture of each card in the table (what NVML's nvmlDeviceGetCudaComputeCapability says)
COMPUTE_CAPABILITY = {
    "NVIDIA GeForce RTX 5090": "12.0",
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": "12.0",
    "NVIDIA H100 80GB HBM3": "9.0",
    "NVIDIA H200": "9.0",
    "NVIDIA B300 SXM6 AC": "10.3",
    "NVIDIA GB300": "10.3",
}
ALIASES = {
    "rtx5090": "NVIDIA GeForce RTX 5090",
    "5090": "NVIDIA GeForce RTX 5090",
    "rtx-pro-6000": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
    "rtxpro6000": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
    "h100": "NVIDIA H100 80GB HBM3",
    "h200": "NVIDIA H200",
    "b300": "NVIDIA B300 SXM6 AC",
    "gb300": "NVIDIA GB300",
}


def card_names() -> list[str]:
    return sorted(ALIASES) + sorted(CARD_TABLE)


def card_from_table(name: str, *, count: int = 1) -> Card:
    full = ALIASES.get(name.lower(), name)
    if full not in CARD_TABLE:
        # the profile may name an edition (Server, Max-Q) of a card the table holds
        full = next((k for k in CARD_TABLE if k.split(" Blackwell")[0] == full.split(" Blackwell")[0]), full)
    if full not in CARD_TABLE:
        raise FieldError(
            "card",
            "not a card deploytool knows",
            value=name,
            hint=f"known cards: {', '.join(card_names())}; or use --gpu UUID on the machine",
        )
    mib, bus, clock, power = CARD_TABLE[full]
    return Card(
        name=full,
        memory_bytes=mib * MIB,
        memory_bus_width_bits=bus,
        max_memory_clock_mhz=clock,
        power_limit_w=power,
        count=count,
        source="table",
        compute_capability=COMPUTE_CAPABILITY.get(full),
    )


def profile_card(profile: Profile) -> Card:
    """The card the profile is made for, from the table: its first match.gpu_name, match.gpu_count
    of them. A name the table lacks is the profile's field, not a flag the person gave."""
    name = profile.match.gpu_name[0]
    try:
        return card_from_table(name, count=profile.match.gpu_count)
    except FieldError as exc:
        where = f"profile {profile.name}" + (f" ({profile.source})" if profile.source else "")
        raise ProfileError(f"{where}: match.gpu_name {name!r}: {exc.problem}", hint=exc.hint) from None


def card_from_gpu(gpu: GpuInfo, *, count: int = 1) -> Card:
    if gpu.memory_total_mib is None:
        raise UsageError(
            f"NVML reports no memory size for {gpu.uuid} ({gpu.name})",
            hint="name the card instead with --card",
        )
    return Card(
        name=gpu.name,
        memory_bytes=gpu.memory_total_mib * MIB,
        free_bytes=None if gpu.memory_free_mib is None else gpu.memory_free_mib * MIB,
        memory_bus_width_bits=gpu.memory_bus_width_bits,
        max_memory_clock_mhz=gpu.max_memory_clock_mhz,
        power_limit_w=gpu.power_limit_w,
        count=count,
        source="nvml",
        uuid=gpu.uuid,
        compute_capability=gpu.compute_capability,
    )


def slot_card(slot: Any, profile: Profile, inventory: Any = None) -> Card | None:
    """The slot's first card through NVML; on the CPU slot (the reference runtime standing in
    for a GPU server) the profile's own card from the table, when it names one."""
    if not slot.is_cpu:
        from ..host.gpus import read_inventory

        inventory = inventory or read_inventory()
        gpu = None if inventory.error else inventory.by_uuid(slot.gpus[0])
        return card_from_gpu(gpu, count=len(slot.gpus)) if gpu is not None else None
    return profile_card(profile) if profile.match.gpu_name else None
