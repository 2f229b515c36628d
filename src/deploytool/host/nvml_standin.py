"""A stand-in for NVML: exactly the calls deploytool makes, answered from a described host.

It has nvidia-ml-py's (pynvml's) call names, constants and return types (its ctypes structs for
PCI and memory info), and fails the way NVML documents: pynvml.NVMLError with
NVML_ERROR_NOT_SUPPORTED for NVLink on a card without it or MIG on a card that cannot do it,
NVML_ERROR_INVALID_ARGUMENT for a link or index the card does not have, NVML_ERROR_NOT_FOUND
for an empty MIG index, NVML_ERROR_UNINITIALIZED before nvmlInit. So code written against it
runs unchanged on pynvml, and read_inventory(StandInNvml(host)) reads a described host the
way read_inventory() reads a real one.

What the driver derives from the real PCIe tree, this derives from the host file: the common
ancestor of two cards from their `pcie_path`s and NUMA nodes, peer-to-peer support from
NVLink, the cards' PCIe peer-to-peer ability and the topology, NVLink peers from `remote`.
`DEPLOYTOOL_NVML_STANDIN=host.yaml` makes every deploytool command read it instead of the
driver (tests and demos on a machine without these cards).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pynvml

from .links import nvlinks_between, p2p_index
from .standin_host import GpuSpec, HostSpec, MigDeviceSpec, cpu_list, load_host

# The constants callers read from the NVML object (read_inventory asks nvml.NVML_CLOCK_MEM, ...).
_CONSTANT_PREFIXES = (
    "NVML_CLOCK_",
    "NVML_TOPOLOGY_",
    "NVML_P2P_",
    "NVML_NVLINK_",
    "NVML_AFFINITY_SCOPE_",
    "NVML_FEATURE_",
    "NVML_DEVICE_MIG_",
    "NVML_ERROR_",
    "NVML_SUCCESS",
    "NVML_TEMPERATURE_",
)
_NVLINK_VERSION = {
    "1.0": pynvml.NVML_NVLINK_VERSION_1_0,
    "2.0": pynvml.NVML_NVLINK_VERSION_2_0,
    "2.2": pynvml.NVML_NVLINK_VERSION_2_2,
    "3.0": pynvml.NVML_NVLINK_VERSION_3_0,
    "3.1": pynvml.NVML_NVLINK_VERSION_3_1,
    "4.0": pynvml.NVML_NVLINK_VERSION_4_0,
    "5.0": pynvml.NVML_NVLINK_VERSION_5_0,
    "6.0": pynvml.NVML_NVLINK_VERSION_6_0,
}
_P2P_STATUS = {
    "ok": pynvml.NVML_P2P_STATUS_OK,
    "chipset_not_supported": pynvml.NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED,
    "gpu_not_supported": pynvml.NVML_P2P_STATUS_GPU_NOT_SUPPORTED,
    "ioh_topology_not_supported": pynvml.NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED,
    "disabled_by_regkey": pynvml.NVML_P2P_STATUS_DISABLED_BY_REGKEY,
    "not_supported": pynvml.NVML_P2P_STATUS_NOT_SUPPORTED,
    "unknown": pynvml.NVML_P2P_STATUS_UNKNOWN,
}


_P2P_INDEX = {
    p2p_index(pynvml.NVML_P2P_CAPS_INDEX_READ): "read",
    pynvml.NVML_P2P_CAPS_INDEX_WRITE: "write",
    pynvml.NVML_P2P_CAPS_INDEX_NVLINK: "nvlink",
    pynvml.NVML_P2P_CAPS_INDEX_ATOMICS: "atomics",
}


def _fail(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)  # pynvml maps the code to its subclass (NVMLError_NotSupported, ...)


@dataclass(frozen=True)
class _Handle:
    """An nvmlDevice_t: a card, or one MIG device of a card."""

    index: int
    mig: int | None = None


class StandInNvml:
    """The NVML calls deploytool makes, with pynvml's names, over one described host."""

    def __init__(self, host: HostSpec, *, source: str = "a described host"):
        self.host = host
        self.described_host = source  # read_inventory names it as the inventory's source
        self._initialised = 0

    @classmethod
    def from_file(cls, path: Path) -> StandInNvml:
        return cls(load_host(Path(path)), source=str(path))

    # -- library -------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.host.init_error == "driver_not_loaded":
            raise _fail(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
        if self.host.init_error == "library_not_found":
            raise _fail(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        self._initialised += 1  # NVML counts nvmlInit calls; each nvmlShutdown takes one back

    def nvmlShutdown(self) -> None:
        self._ready()
        self._initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._ready()
        return self.host.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._ready()
        return self.host.cuda_driver_version

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return self.nvmlSystemGetCudaDriverVersion()

    # -- devices -------------------------------------------------------------------------------
    def nvmlDeviceGetCount(self) -> int:
        self._ready()
        return len(self.host.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._ready()
        if not 0 <= index < len(self.host.gpus):
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(index)

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        mig = self._mig_or_none(handle)
        return mig.uuid if mig else self._card(handle).uuid

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        mig = self._mig_or_none(handle)
        return f"{self._card(handle).name} MIG {mig.name}" if mig else self._card(handle).name

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle) -> Any:
        mig = self._mig_or_none(handle)
        total, free = (
            (mig.memory_total_mib, mig.memory_free_mib)
            if mig
            else (self._card(handle).memory_total_mib, self._card(handle).memory_free_mib)
        )
        memory = pynvml.c_nvmlMemory_t()
        memory.total, memory.free, memory.used = total << 20, free << 20, (total - free) << 20
        return memory

    def nvmlDeviceGetCudaComputeCapability(self, handle: _Handle) -> tuple[int, int]:
        major, minor = self._whole_card(handle).compute_capability.split(".")
        return int(major), int(minor)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Handle) -> int:
        card = self._whole_card(handle)
        if card.power_limit_w is None:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return round(card.power_limit_w * 1000)  # milliwatts, as NVML

    # -- what the card reads now (top) -------------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> Any:
        live = self._live(handle)
        rates = pynvml.c_nvmlUtilization_t()
        rates.gpu, rates.memory = live.utilization_pct, 0
        return rates

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        return round(self._live(handle).power_w * 1000)  # milliwatts, as NVML

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._live(handle).temperature_c

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: _Handle) -> int:
        mask = 0
        for reason in self._live(handle).throttle:
            words = "".join(w.capitalize() for w in reason.split("_"))
            mask |= getattr(pynvml, f"nvmlClocksEventReason{words}", 0) or getattr(
                pynvml, f"nvmlClocksThrottleReason{words}", 0
            )
        return mask

    def _live(self, handle: _Handle) -> Any:
        live = self._whole_card(handle).live
        if live is None:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return live

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: _Handle) -> int:
        return self._pcie(handle).gen

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: _Handle) -> int:
        return self._pcie(handle).gen_max

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, handle: _Handle) -> int:
        pcie = self._pcie(handle)
        return pcie.gpu_gen_max or pcie.gen_max

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: _Handle) -> int:
        return self._pcie(handle).width

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: _Handle) -> int:
        return self._pcie(handle).width_max

    def nvmlDeviceGetMemoryBusWidth(self, handle: _Handle) -> int:
        return self._given(self._whole_card(handle).memory_bus_width_bits)

    def nvmlDeviceGetMaxClockInfo(self, handle: _Handle, clock: int) -> int:
        card = self._whole_card(handle)
        if clock != pynvml.NVML_CLOCK_MEM:  # the host files describe the memory clock only
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self._given(card.max_memory_clock_mhz)

    def nvmlDeviceGetPciInfo(self, handle: _Handle) -> Any:
        return _pci_info(self._whole_card(handle).pci_bus_id)

    # -- NUMA and CPU affinity -------------------------------------------------------------------
    def nvmlDeviceGetMemoryAffinity(self, handle: _Handle, node_set_size: int, scope: int) -> Any:
        card = self._whole_card(handle)
        if card.numa_node is None or scope not in (
            pynvml.NVML_AFFINITY_SCOPE_NODE,
            pynvml.NVML_AFFINITY_SCOPE_SOCKET,
        ):
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return _bitmask([card.numa_node], node_set_size)

    def nvmlDeviceGetCpuAffinity(self, handle: _Handle, cpu_set_size: int) -> Any:
        card = self._whole_card(handle)
        if card.numa_node is None or card.numa_node not in self.host.cpus:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return _bitmask(cpu_list(self.host.cpus[card.numa_node]), cpu_set_size)

    def nvmlDeviceGetNumaNodeId(self, handle: _Handle) -> int:
        # Only where the card's memory is a NUMA node of its own (Grace systems).
        return self._given(self._whole_card(handle).gpu_numa_id)

    # -- NVLink ----------------------------------------------------------------------------------
    def nvmlDeviceGetNvLinkState(self, handle: _Handle, link: int) -> int:
        spec = self._link(handle, link)
        active = spec.links if spec.active is None else spec.active
        return pynvml.NVML_FEATURE_ENABLED if link < active else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkVersion(self, handle: _Handle, link: int) -> int:
        return _NVLINK_VERSION[self._link(handle, link).version]

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: _Handle, link: int) -> Any:
        return _pci_info(self._remote(handle, link)[1])

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: _Handle, link: int) -> int:
        return self._remote(handle, link)[0]

    # -- between two cards -----------------------------------------------------------------------
    def nvmlDeviceGetTopologyCommonAncestor(self, first: _Handle, second: _Handle) -> int:
        a, b = self._whole_card(first), self._whole_card(second)
        return common_ancestor(a, b)

    def nvmlDeviceGetP2PStatus(self, first: _Handle, second: _Handle, index: Any) -> int:
        a, b = self._whole_card(first), self._whole_card(second)
        name = _P2P_INDEX.get(p2p_index(index))
        if name is None:
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        pair = {first.index, second.index}
        for override in self.host.p2p:
            if {override.a, override.b} == pair and override.index == name:
                return _P2P_STATUS[override.status]
        linked = self._nvlinks_between(first.index, second.index) > 0
        if name == "nvlink":
            return pynvml.NVML_P2P_STATUS_OK if linked else pynvml.NVML_P2P_STATUS_NOT_SUPPORTED
        if linked:
            return pynvml.NVML_P2P_STATUS_OK
        if not (a.p2p_over_pcie and b.p2p_over_pcie):
            return pynvml.NVML_P2P_STATUS_GPU_NOT_SUPPORTED
        if name == "atomics":  # PCIe peer atomics: not offered between these cards
            return pynvml.NVML_P2P_STATUS_NOT_SUPPORTED
        if common_ancestor(a, b) == pynvml.NVML_TOPOLOGY_SYSTEM:
            return pynvml.NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED
        return pynvml.NVML_P2P_STATUS_OK

    # -- MIG -------------------------------------------------------------------------------------
    def nvmlDeviceGetMigMode(self, handle: _Handle) -> list[int]:
        mig = self._whole_card(handle).mig
        if mig is None:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        pending = mig.current if mig.pending is None else mig.pending
        return [int(mig.current), int(pending)]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: _Handle) -> int:
        mig = self._whole_card(handle).mig
        if mig is None:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return mig.max_devices if mig.current else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: _Handle, index: int) -> _Handle:
        mig = self._whole_card(handle).mig
        if mig is None:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= index < mig.max_devices:
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if not mig.current or index >= len(mig.devices):
            raise _fail(pynvml.NVML_ERROR_NOT_FOUND)
        return _Handle(handle.index, index)

    def nvmlDeviceGetGpuInstanceId(self, handle: _Handle) -> int:
        mig = self._mig_or_none(handle)
        if mig is None:  # asked of a whole card
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return mig.gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, handle: _Handle) -> int:
        mig = self._mig_or_none(handle)
        if mig is None:
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return mig.compute_instance_id

    # -- helpers ---------------------------------------------------------------------------------
    def _ready(self) -> None:
        if self._initialised <= 0:
            raise _fail(pynvml.NVML_ERROR_UNINITIALIZED)

    def _card(self, handle: Any) -> GpuSpec:
        self._ready()
        if not isinstance(handle, _Handle) or not 0 <= handle.index < len(self.host.gpus):
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self.host.gpus[handle.index]

    def _whole_card(self, handle: Any) -> GpuSpec:
        """A card-level reading: a MIG device has none of its own (power, PCIe, links, ...)."""
        card = self._card(handle)
        if handle.mig is not None:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return card

    def _mig_or_none(self, handle: Any) -> MigDeviceSpec | None:
        card = self._card(handle)
        if handle.mig is None:
            return None
        if card.mig is None or handle.mig >= len(card.mig.devices):
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return card.mig.devices[handle.mig]

    def _pcie(self, handle: _Handle) -> Any:
        return self._given(self._whole_card(handle).pcie)

    @staticmethod
    def _given(value: Any) -> Any:
        if value is None:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    def _link(self, handle: _Handle, link: int) -> Any:
        spec = self._whole_card(handle).nvlink
        if spec is None:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < min(spec.links, pynvml.NVML_NVLINK_MAX_LINKS):
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return spec

    def _remote(self, handle: _Handle, link: int) -> tuple[int, str]:
        """(NVML_NVLINK_DEVICE_TYPE_*, PCI bus id) at the far end of an active link."""
        spec = self._link(handle, link)
        if self.nvmlDeviceGetNvLinkState(handle, link) != pynvml.NVML_FEATURE_ENABLED:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)  # nothing at the far end of a link that is down
        if spec.remote == "nvswitch":
            switches = self.host.nvswitches
            return pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH, switches[link % len(switches)]
        return pynvml.NVML_NVLINK_DEVICE_TYPE_GPU, self.host.gpus[spec.remote[link]].pci_bus_id

    def _nvlinks_between(self, first: int, second: int) -> int:
        kinds = {pynvml.NVML_NVLINK_DEVICE_TYPE_GPU: "gpu", pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH: "switch"}

        def far_ends(index: int) -> list[tuple[str | None, str]]:
            handle = _Handle(index)
            spec = self.host.gpus[index].nvlink
            if spec is None:
                return []
            active = spec.links if spec.active is None else spec.active
            return [
                (kinds.get(kind), bus)
                for kind, bus in (self._remote(handle, link) for link in range(min(active, spec.links)))
            ]

        return nvlinks_between(far_ends(first), far_ends(second), self.host.gpus[second].pci_bus_id)


for _name in dir(pynvml):
    if _name.startswith(_CONSTANT_PREFIXES) and isinstance(getattr(pynvml, _name), (int, tuple)):
        setattr(StandInNvml, _name, getattr(pynvml, _name))
NVMLError = pynvml.NVMLError  # what its calls raise: the same class callers catch on the real library


def common_ancestor(a: GpuSpec, b: GpuSpec) -> int:
    """NVML's topology level between two cards, from where they sit in the PCIe tree."""
    if a.board is not None and a.board == b.board:
        return pynvml.NVML_TOPOLOGY_INTERNAL
    if a.pcie_path[0] == b.pcie_path[0]:  # under one host bridge
        shared = 0
        for x, y in zip(a.pcie_path, b.pcie_path, strict=False):  # paths of any depths
            if x != y:
                break
            shared += 1
        if shared == 1:
            return pynvml.NVML_TOPOLOGY_HOSTBRIDGE
        # a switch is shared: one switch if both hang straight off it, else several
        return pynvml.NVML_TOPOLOGY_SINGLE if a.pcie_path == b.pcie_path else pynvml.NVML_TOPOLOGY_MULTIPLE
    if a.numa_node == b.numa_node:
        return pynvml.NVML_TOPOLOGY_NODE
    return pynvml.NVML_TOPOLOGY_SYSTEM


def _pci_info(bus_id: str) -> Any:
    info = pynvml.nvmlPciInfo_t()
    domain, bus, rest = bus_id.split(":")
    info.busId = bus_id.encode()
    info.busIdLegacy = f"{int(domain, 16) & 0xFFFF:04X}:{bus}:{rest}".encode()
    info.domain, info.bus, info.device = int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16)
    return info


def _bitmask(members: list[int], words: int) -> Any:
    """NVML's affinity answer: an array of 64-bit words, bit n set for member n."""
    array = (ctypes.c_ulonglong * words)()
    for member in members:
        if member // 64 < words:
            array[member // 64] |= 1 << (member % 64)
    return array
