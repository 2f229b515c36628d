"""The machine's NVIDIA GPUs, read through NVML: each card, its MIG devices, and how every two
cards are connected (topology.py).

Every reading that a card or driver does not support is None rather than an error: an RTX
card reports no NVLink, a MIG device no power limit, a host that is not a Grace system no GPU
NUMA id. The NVML read is the driver's (nvidia-ml-py) unless DEPLOYTOOL_NVML_STANDIN names a
described host (nvml.py); read_inventory(nvml) takes any object with NVML's calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import FieldError, NoGpuError
from .nvml import nvml_library
from .nvml import optional as _optional

MIB = 1024 * 1024
# Affinity answers are bitmasks in 64-bit words: enough words for 1024 CPUs and 64 NUMA nodes.
CPU_SET_WORDS = 16
NODE_SET_WORDS = 1


@dataclass
class NvLink:
    link: int
    active: bool
    version: str | None = None  # "5.0"
    remote: str | None = None  # "gpu", "switch", "ibmnpu", "unknown": what is at the far end
    remote_bus_id: str | None = None  # its PCI bus id (a peer card's, or an NVSwitch's)


@dataclass
class MigDevice:
    uuid: str  # MIG-...
    name: str  # "NVIDIA H200 NVL MIG 3g.71gb"
    memory_total_mib: int | None
    memory_free_mib: int | None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@dataclass
class GpuInfo:
    index: int
    uuid: str
    name: str
    compute_capability: str | None  # "9.0"
    memory_total_mib: int | None
    memory_free_mib: int | None
    power_limit_w: float | None
    pcie_link_gen: int | None
    pcie_link_gen_max: int | None  # what the card and its slot allow together (NVML's max)
    pcie_link_width: int | None
    pcie_link_width_max: int | None
    # For the memory-bandwidth roofline: bus width (bits) x max memory clock (MHz) x 2.
    memory_bus_width_bits: int | None = None
    max_memory_clock_mhz: int | None = None
    pcie_link_gen_gpu_max: int | None = None  # what the card alone can do
    pci_bus_id: str | None = None  # "00000000:01:00.0"
    numa_node: int | None = None  # the CPU NUMA node nearest the card
    cpu_affinity: str | None = None  # the CPUs nearest it, "0-55"
    gpu_numa_id: int | None = None  # the card's memory as a NUMA node (Grace systems)
    nvlinks: list[NvLink] | None = None  # None: the card has no NVLink (or NVML does not say)
    mig_mode: bool | None = None  # None: the card cannot do MIG
    mig_devices: list[MigDevice] = field(default_factory=list)
    mig_parent: str | None = None  # set on the view of a MIG device as a card of its own: the card's UUID
    mig_index: int | None = None  # and its place among the card's MIG devices
    mig_name: str | None = None  # and its NVML name ("NVIDIA H200 NVL MIG 3g.71gb")
    matching_profiles: list[str] = field(default_factory=list)

    @property
    def memory_total_gib(self) -> float | None:
        return None if self.memory_total_mib is None else self.memory_total_mib / 1024

    @property
    def label(self) -> str:
        return f"GPU{self.index} MIG{self.mig_index}" if self.mig_parent else f"GPU{self.index}"

    @property
    def active_nvlinks(self) -> int:
        return sum(1 for link in self.nvlinks or [] if link.active)

    def pcie_now(self) -> str | None:
        """'PCIe 4.0 x4': the link as it runs now; None where NVML does not say both."""
        if self.pcie_link_gen is None or self.pcie_link_width is None:
            return None
        return f"PCIe {_gen(self.pcie_link_gen)} x{self.pcie_link_width}"

    def pcie_text(self) -> str:
        """'PCIe 4.0 x4 (max 4.0 x4; the card 5.0)' as the cards' tables show it."""
        if self.pcie_link_gen is None and self.pcie_link_width is None:
            return "PCIe ?"
        now = self.pcie_now() or f"PCIe {_gen(self.pcie_link_gen)} x{_num(self.pcie_link_width)}"
        most = f"max {_gen(self.pcie_link_gen_max)} x{_num(self.pcie_link_width_max)}"
        card = self.pcie_link_gen_gpu_max
        if card is not None and self.pcie_link_gen_max is not None and card > self.pcie_link_gen_max:
            most += f"; the card {_gen(card)}"
        return f"{now} ({most})"

    def mig_views(self) -> list[GpuInfo]:
        """Each MIG device as a card of its own (what CUDA sees): the parent's name, architecture
        and place, the device's own memory, and no power limit or link of its own."""
        return [
            replace(
                self,
                uuid=m.uuid,
                mig_name=m.name,
                memory_total_mib=m.memory_total_mib,
                memory_free_mib=m.memory_free_mib,
                power_limit_w=None,
                nvlinks=None,
                mig_mode=None,
                mig_devices=[],
                mig_parent=self.uuid,
                mig_index=n,
                matching_profiles=[],
            )
            for n, m in enumerate(self.mig_devices)
        ]


@dataclass
class Inventory:
    gpus: list[GpuInfo]
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # the newest CUDA the driver supports, "13.0"
    error: str | None = None  # why there is no inventory (no driver, no NVML)
    pairs: list[Any] = field(default_factory=list)  # topology.GpuPair for every two cards
    source: str = "NVML"  # or "stand-in NVML over FILE"

    def by_uuid(self, uuid: str) -> GpuInfo | None:
        """A card, or a MIG device seen as a card (uuid MIG-...)."""
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
            found = next((view for view in gpu.mig_views() if view.uuid == uuid), None)
            if found is not None:
                return found
        return None

    def card(self, uuid: str) -> GpuInfo:
        """The card a person named by UUID: every command that takes --gpu reads it here, so each
        refuses a card this machine lacks in the same words."""
        found = self.by_uuid(uuid)
        if found is None:
            known = ", ".join(g.uuid for g in self.gpus) or "none"
            raise FieldError(
                "gpus", "no such GPU on this machine", value=uuid, hint=f"this machine's GPUs: {known}"
            )
        return found

    def pair(self, a: int, b: int) -> Any:
        """The topology.GpuPair between cards a and b (indexes), or None."""
        low, high = min(a, b), max(a, b)
        return next((p for p in self.pairs if (p.a, p.b) == (low, high)), None)


def read_inventory(nvml: Any = None) -> Inventory:
    """Read every GPU through NVML. Without a driver: an empty inventory with `error` set."""
    from .topology import read_pairs

    nvml = nvml if nvml is not None else nvml_library()
    described = getattr(nvml, "described_host", None)
    source = f"stand-in NVML over {described}" if described else "NVML"
    if nvml is None:
        return Inventory(gpus=[], error="nvidia-ml-py is not installed")
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return Inventory(
            gpus=[],
            error=f"NVML is not available on this machine ({_nvml_text(exc)}): "
            "no NVIDIA driver, or not an NVIDIA GPU host",
            source=source,
        )
    from pynvml import NVMLError  # the stand-in raises pynvml's errors too

    index = None
    try:
        handles = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handles.append(nvml.nvmlDeviceGetHandleByIndex(index))
        cards = []
        for index, handle in enumerate(handles):
            cards.append(_read_gpu(nvml, index, handle))
        index = None
        inventory = Inventory(
            gpus=cards,
            driver_version=_optional(lambda: _text(nvml.nvmlSystemGetDriverVersion())),
            cuda_driver_version=_optional(lambda: _cuda_version(nvml.nvmlSystemGetCudaDriverVersion_v2())),
            pairs=read_pairs(nvml, handles, cards),
            source=source,
        )
    except NVMLError as exc:  # a card that cannot be read (lost, or the driver gone): said, not a traceback
        where = "the cards" if index is None else f"GPU {index}"
        return Inventory(gpus=[], error=f"NVML could not read {where} ({_nvml_text(exc)})", source=source)
    finally:
        _optional(nvml.nvmlShutdown)
    return inventory


def require_inventory(*, hint: str) -> Inventory:
    """This host's cards, or NoGpuError with the caller's hint: what the command can do without
    them is the command's to say."""
    inventory = read_inventory()
    if inventory.error:
        raise NoGpuError(inventory.error, hint=hint)
    return inventory


def _read_gpu(nvml: Any, index: int, handle: Any) -> GpuInfo:
    memory = _optional(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
    capability = _optional(lambda: nvml.nvmlDeviceGetCudaComputeCapability(handle))
    power_mw = _optional(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle))
    pci = _optional(lambda: nvml.nvmlDeviceGetPciInfo(handle))
    nodes = _optional(
        lambda: nvml.nvmlDeviceGetMemoryAffinity(handle, NODE_SET_WORDS, nvml.NVML_AFFINITY_SCOPE_NODE)
    )
    cpus = _optional(lambda: nvml.nvmlDeviceGetCpuAffinity(handle, CPU_SET_WORDS))
    node_list = _bits(nodes)
    mig_mode = _optional(lambda: nvml.nvmlDeviceGetMigMode(handle))
    return GpuInfo(
        index=index,
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        name=_text(nvml.nvmlDeviceGetName(handle)),
        compute_capability=f"{capability[0]}.{capability[1]}" if capability else None,
        memory_total_mib=memory.total // MIB if memory else None,
        memory_free_mib=memory.free // MIB if memory else None,
        power_limit_w=power_mw / 1000 if power_mw is not None else None,
        pcie_link_gen=_optional(lambda: nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)),
        pcie_link_gen_max=_optional(lambda: nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)),
        pcie_link_width=_optional(lambda: nvml.nvmlDeviceGetCurrPcieLinkWidth(handle)),
        pcie_link_width_max=_optional(lambda: nvml.nvmlDeviceGetMaxPcieLinkWidth(handle)),
        memory_bus_width_bits=_optional(lambda: nvml.nvmlDeviceGetMemoryBusWidth(handle)),
        max_memory_clock_mhz=_optional(lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_MEM)),
        pcie_link_gen_gpu_max=_optional(lambda: nvml.nvmlDeviceGetGpuMaxPcieLinkGeneration(handle)),
        pci_bus_id=_text(pci.busId) if pci is not None else None,
        numa_node=node_list[0] if node_list else None,
        cpu_affinity=_ranges(_bits(cpus)) or None,
        gpu_numa_id=_optional(lambda: nvml.nvmlDeviceGetNumaNodeId(handle)),
        nvlinks=_read_nvlinks(nvml, handle),
        mig_mode=bool(mig_mode[0]) if mig_mode is not None else None,
        mig_devices=_read_mig_devices(nvml, handle) if mig_mode is not None and mig_mode[0] else [],
    )


_REMOTE = {0x00: "gpu", 0x01: "ibmnpu", 0x02: "switch", 0xFF: "unknown"}  # NVML_NVLINK_DEVICE_TYPE_*
_VERSION = {
    1: "1.0",
    2: "2.0",
    3: "2.2",
    4: "3.0",
    5: "3.1",
    6: "4.0",
    7: "5.0",
    8: "6.0",
}  # NVML_NVLINK_VERSION_*


def _read_nvlinks(nvml: Any, handle: Any) -> list[NvLink] | None:
    """Every link NVML answers for. A card without NVLink answers NOT_SUPPORTED for every link;
    a card answers INVALID_ARGUMENT past its own last link: both are simply not listed."""
    links: list[NvLink] = []
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        state = _optional(lambda n: nvml.nvmlDeviceGetNvLinkState(handle, n), link)
        if state is None:
            continue
        active = state == getattr(nvml, "NVML_FEATURE_ENABLED", 1)
        version = _optional(lambda n: nvml.nvmlDeviceGetNvLinkVersion(handle, n), link)
        remote = (
            _optional(lambda n: nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, n), link) if active else None
        )
        pci = _optional(lambda n: nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, n), link) if active else None
        links.append(
            NvLink(
                link=link,
                active=active,
                version=_VERSION.get(version) if version is not None else None,
                remote=_REMOTE.get(remote, "unknown") if remote is not None else None,
                remote_bus_id=_text(pci.busId) if pci is not None else None,
            )
        )
    return links or None


def _read_mig_devices(nvml: Any, handle: Any) -> list[MigDevice]:
    devices: list[MigDevice] = []
    for index in range(_optional(lambda: nvml.nvmlDeviceGetMaxMigDeviceCount(handle)) or 0):
        mig = _optional(lambda n: nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, n), index)
        if mig is None:  # NOT_FOUND: no MIG device at this index
            continue
        memory = _optional(lambda m: nvml.nvmlDeviceGetMemoryInfo(m), mig)
        devices.append(
            MigDevice(
                uuid=_text(nvml.nvmlDeviceGetUUID(mig)),
                name=_text(nvml.nvmlDeviceGetName(mig)),
                memory_total_mib=memory.total // MIB if memory else None,
                memory_free_mib=memory.free // MIB if memory else None,
                gpu_instance_id=_optional(lambda m: nvml.nvmlDeviceGetGpuInstanceId(m), mig),
                compute_instance_id=_optional(lambda m: nvml.nvmlDeviceGetComputeInstanceId(m), mig),
            )
        )
    return devices


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _cuda_version(value: int) -> str:
    return f"{value // 1000}.{(value % 1000) // 10}"


def _nvml_text(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def _bits(words: Any) -> list[int]:
    """Set bits of NVML's affinity answer (64-bit words), lowest first."""
    if words is None:
        return []
    return [w * 64 + b for w, word in enumerate(words) for b in range(64) if int(word) >> b & 1]


def _ranges(members: list[int]) -> str:
    """[0, 1, 2, 3, 8] -> '0-3,8', as nvidia-smi writes CPU affinity."""
    out: list[str] = []
    for m in members:
        if out and int(out[-1].split("-")[-1]) == m - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{m}"
        else:
            out.append(str(m))
    return ",".join(out)


def _gen(gen: int | None) -> str:
    return "?" if gen is None else f"{gen}.0"


def _num(value: Any) -> str:
    return "?" if value is None else str(value)
