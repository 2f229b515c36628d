"""The machine's NVIDIA GPUs, read through NVML, and which profiles fit them.

Every reading that a card or driver does not support is None rather than an error: an RTX
card reports no max PCIe width under some drivers, a MIG slice no power limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from ..errors import NoGpuError
from ..profiles import Profile

try:  # nvidia-ml-py; the import itself works without a driver, nvmlInit does not
    import pynvml
except ImportError:  # pragma: no cover - it is a dependency, but keep the message clear
    pynvml = None  # type: ignore[assignment]

MIB = 1024 * 1024


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
    pcie_link_gen_max: int | None
    pcie_link_width: int | None
    pcie_link_width_max: int | None
    # For the memory-bandwidth roofline: bus width (bits) x max memory clock (MHz) x 2.
    memory_bus_width_bits: int | None = None
    max_memory_clock_mhz: int | None = None
    matching_profiles: list[str] = field(default_factory=list)

    @property
    def memory_total_gib(self) -> float | None:
        return None if self.memory_total_mib is None else self.memory_total_mib / 1024


@dataclass
class Inventory:
    gpus: list[GpuInfo]
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # the newest CUDA the driver supports, "13.0"
    error: str | None = None  # why there is no inventory (no driver, no NVML)

    def by_uuid(self, uuid: str) -> GpuInfo | None:
        return next((g for g in self.gpus if g.uuid == uuid), None)


def read_inventory(nvml: Any = None) -> Inventory:
    """Read every GPU through NVML. Without a driver: an empty inventory with `error` set."""
    nvml = nvml if nvml is not None else pynvml
    if nvml is None:
        return Inventory(gpus=[], error="nvidia-ml-py is not installed")
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return Inventory(gpus=[], error=f"NVML is not available on this machine ({_nvml_text(exc)}): "
                                        "no NVIDIA driver, or not an NVIDIA GPU host")
    try:
        inventory = Inventory(
            gpus=[_read_gpu(nvml, i) for i in range(nvml.nvmlDeviceGetCount())],
            driver_version=_optional(lambda: _text(nvml.nvmlSystemGetDriverVersion())),
            cuda_driver_version=_optional(lambda: _cuda_version(nvml.nvmlSystemGetCudaDriverVersion_v2())),
        )
    finally:
        _optional(nvml.nvmlShutdown)
    return inventory


def require_inventory() -> Inventory:
    inventory = read_inventory()
    if inventory.error:
        raise NoGpuError(inventory.error, hint="on a machine without a GPU, deploy the embedded default with --cpu")
    return inventory


def _read_gpu(nvml: Any, index: int) -> GpuInfo:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    memory = _optional(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
    capability = _optional(lambda: nvml.nvmlDeviceGetCudaComputeCapability(handle))
    power_mw = _optional(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle))
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
    )


def _optional(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except Exception:  # NVMLError_NotSupported and friends: the reading is simply absent
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _cuda_version(value: int) -> str:
    return f"{value // 1000}.{(value % 1000) // 10}"


def _nvml_text(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


# -- which profiles fit which cards ------------------------------------------------------------
Verdict = Literal["runnable", "runnable-with-less-memory", "incompatible"]


@dataclass
class Fit:
    profile: str
    verdict: Verdict
    reasons: list[str]


def classify(profile: Profile, gpus: list[GpuInfo]) -> Fit:
    """Can this profile run on these cards? Compute capability and GPU count are hard limits
    (kernels are built per architecture; tensor parallelism needs the cards); less memory than
    the profile wants may still run with a shorter context or a smaller KV pool."""
    match = profile.match
    if profile.is_simulator:
        return Fit(profile.name, "runnable", ["the simulator needs no GPU"])
    reasons: list[str] = []
    verdict: Verdict = "runnable"
    if len(gpus) < match.gpu_count:
        return Fit(profile.name, "incompatible", [f"needs {match.gpu_count} GPUs, the slot has {len(gpus)}"])
    for gpu in gpus:
        if match.compute_capability and gpu.compute_capability != match.compute_capability:
            return Fit(profile.name, "incompatible",
                       [f"{gpu.name} is compute capability {gpu.compute_capability}, "
                        f"the profile's kernels need {match.compute_capability}"])
        if match.gpu_name and gpu.name not in match.gpu_name:
            reasons.append(f"{gpu.name} is not one of {', '.join(match.gpu_name)} (same architecture)")
        if match.min_memory_gib and gpu.memory_total_gib is not None and gpu.memory_total_gib < match.min_memory_gib:
            verdict = "runnable-with-less-memory"
            reasons.append(f"{gpu.name} has {gpu.memory_total_gib:.0f} GiB, the profile wants {match.min_memory_gib:g} GiB")
    if match.gpu_count < len(gpus):
        reasons.append(f"uses {match.gpu_count} of the slot's {len(gpus)} GPUs")
    return Fit(profile.name, verdict, reasons or ["name, compute capability, memory and GPU count match"])


def annotate_matches(inventory: Inventory, profiles: list[Profile]) -> Inventory:
    """Fill each card's `matching_profiles`: profiles made for this card (by name and compute
    capability), whatever their GPU count."""
    for gpu in inventory.gpus:
        gpu.matching_profiles = [
            p.name for p in profiles
            if not p.is_simulator and p.match.gpu_name and gpu.name in p.match.gpu_name
            and (p.match.compute_capability in (None, gpu.compute_capability))
        ]
    return inventory
