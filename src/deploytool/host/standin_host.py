"""A described host for the stand-in NVML: its cards, their PCIe place and links, read from YAML.

A host file says what the hardware is (each card's name, memory, power limit, PCIe link, the
PCIe bridges above it, its NUMA node, its NVLinks, its MIG devices); the stand-in NVML
(nvml_standin.py) derives from that what NVML would answer, the way the driver derives it from
the real PCIe tree. The schema is in docs/gpus.md ("A described host"); the hosts the tests
use are in tests/data/nvml-hosts/.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import UsageError
from ..yamlio import load_yaml


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PcieSpec(_Strict):
    """As NVML reports it: `gen_max`/`width_max` are what the card AND its slot allow (NVML's
    max), `gpu_gen_max` what the card alone can do (a PCIe 5.0 card in a 4.0 slot: 4 and 5)."""

    gen: int = Field(ge=1, le=6)
    gen_max: int = Field(ge=1, le=6)
    gpu_gen_max: int | None = Field(default=None, ge=1, le=6)
    width: int = Field(ge=1, le=32)
    width_max: int = Field(ge=1, le=32)


class NvLinkSpec(_Strict):
    links: int = Field(ge=1, le=36, description="NVLinks the card has")
    active: int | None = Field(default=None, ge=0, description="how many of them are up (default: all)")
    version: Literal["1.0", "2.0", "2.2", "3.0", "3.1", "4.0", "5.0", "6.0"] = "5.0"
    # "nvswitch": every link goes to the host's NVSwitches (nvswitches, round robin); or one
    # peer GPU index per link (a bridge between cards).
    remote: Literal["nvswitch"] | list[int] = "nvswitch"


class MigDeviceSpec(_Strict):
    uuid: str = Field(pattern=r"^MIG-[0-9a-fA-F-]{8,}$")
    name: str
    memory_total_mib: int = Field(gt=0)
    memory_free_mib: int = Field(ge=0)
    gpu_instance_id: int = Field(ge=0)
    compute_instance_id: int = Field(ge=0)


class MigSpec(_Strict):
    current: bool
    pending: bool | None = None  # default: as current
    max_devices: int = Field(default=7, ge=1)
    devices: list[MigDeviceSpec] = Field(default_factory=list)


class LiveSpec(_Strict):
    """A card's readings of the moment, as `top` reads them: utilisation, power, temperature and
    the clock event reasons a throttled card reports (NVML's names, without their prefix)."""

    utilization_pct: int = Field(default=0, ge=0, le=100)
    power_w: float = Field(default=0, ge=0)
    temperature_c: int = Field(default=30, ge=0)
    # NVML's clock event reasons by name: gpu_idle, applications_clocks_setting, sw_power_cap,
    # hw_slowdown, sync_boost, sw_thermal_slowdown, hw_thermal_slowdown, hw_power_brake_slowdown
    throttle: list[
        Literal[
            "gpu_idle",
            "applications_clocks_setting",
            "sw_power_cap",
            "hw_slowdown",
            "sync_boost",
            "sw_thermal_slowdown",
            "hw_thermal_slowdown",
            "hw_power_brake_slowdown",
        ]
    ] = Field(default_factory=list)


class GpuSpec(_Strict):
    uuid: str = Field(pattern=r"^GPU-[0-9a-fA-F-]{8,}$")
    name: str
    compute_capability: str = Field(pattern=r"^\d+\.\d+$")
    memory_total_mib: int = Field(gt=0)
    memory_free_mib: int = Field(ge=0)
    power_limit_w: float | None = Field(default=None, gt=0)
    pcie: PcieSpec | None = None
    memory_bus_width_bits: int | None = None
    max_memory_clock_mhz: int | None = None
    pci_bus_id: str = Field(pattern=r"^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.0$")
    # The PCIe components above the card, the host bridge (root complex) first, then each
    # switch down to the card: the common ancestor of two cards is read from these.
    pcie_path: list[str] = Field(min_length=1)
    numa_node: int | None = Field(default=None, ge=0)  # the CPU node nearest the card
    gpu_numa_id: int | None = Field(default=None, ge=0)  # the card's own memory as a NUMA node (Grace)
    board: str | None = None  # cards on one board (dual-GPU boards) share this
    p2p_over_pcie: bool = True  # GeForce cards: the driver offers no PCIe peer-to-peer
    nvlink: NvLinkSpec | None = None  # None: the card has no NVLink (NVML: not supported)
    mig: MigSpec | None = None  # None: the card cannot do MIG (NVML: not supported)
    live: LiveSpec | None = None  # what the card reads now (top); None: NVML says not supported


class P2POverride(_Strict):
    """A peer-to-peer answer the rules would not derive (a BIOS that disables it, say)."""

    a: int
    b: int
    index: Literal["read", "write", "nvlink", "atomics"]
    status: Literal[
        "ok",
        "chipset_not_supported",
        "gpu_not_supported",
        "ioh_topology_not_supported",
        "disabled_by_regkey",
        "not_supported",
        "unknown",
    ]


class HostSpec(_Strict):
    description: str
    source: str  # where the figures come from: a document, a capture, or "described"
    driver_version: str
    cuda_driver_version: int  # as NVML returns it: 13000 for CUDA 13.0
    cpus: dict[int, str] = Field(default_factory=dict)  # NUMA node -> its CPUs, "0-55"
    nvswitches: list[str] = Field(default_factory=list)  # PCI bus ids of the NVSwitches (one domain)
    gpus: list[GpuSpec]
    p2p: list[P2POverride] = Field(default_factory=list)
    # nvmlInit's answer on a host without a working driver.
    init_error: Literal["driver_not_loaded", "library_not_found"] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> HostSpec:
        problems: list[str] = []
        for key in ("uuid", "pci_bus_id"):
            values = [getattr(g, key) for g in self.gpus]
            problems += [f"gpus: {key} {v} appears twice" for v in sorted(set(values)) if values.count(v) > 1]
        for i, gpu in enumerate(self.gpus):
            if gpu.numa_node is not None and self.cpus and gpu.numa_node not in self.cpus:
                problems.append(
                    f"gpus.{i}.numa_node: node {gpu.numa_node} is not in cpus ({sorted(self.cpus)})"
                )
            link = gpu.nvlink
            if link is None:
                continue
            if link.active is not None and link.active > link.links:
                problems.append(f"gpus.{i}.nvlink.active: {link.active} of {link.links} links")
            if link.remote == "nvswitch" and not self.nvswitches and (link.active is None or link.active):
                problems.append(f"gpus.{i}.nvlink.remote: nvswitch, but the host lists no nvswitches")
            if isinstance(link.remote, list):
                if len(link.remote) != link.links:
                    problems.append(
                        f"gpus.{i}.nvlink.remote: one peer per link ({link.links}), got {len(link.remote)}"
                    )
                problems += [
                    f"gpus.{i}.nvlink.remote: no GPU {p} on this host (or the card itself)"
                    for p in link.remote
                    if p == i or not 0 <= p < len(self.gpus)
                ]
        if problems:
            raise ValueError("; ".join(problems))
        return self


def load_host(path: Path) -> HostSpec:
    """The host file, or a UsageError naming the file, the line and what was expected."""
    doc = load_yaml(Path(path))
    try:
        return HostSpec.model_validate(doc.data)
    except ValidationError as exc:
        lines = [f'{path}: not a valid host description (docs/gpus.md, "A described host"):']
        for err in exc.errors():
            loc = tuple(err["loc"])
            what = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
            lines.append(f"  {doc.where(loc)}: {'.'.join(str(p) for p in loc) or 'host'}: {what}")
        raise UsageError("\n".join(lines)) from None


def cpu_list(text: str) -> list[int]:
    """'0-3,8' -> [0, 1, 2, 3, 8]."""
    out: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        low, _, high = part.partition("-")
        out += list(range(int(low), int(high or low) + 1))
    return out
