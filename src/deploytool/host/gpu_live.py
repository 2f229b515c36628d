"""What each card reads now, for `top`: utilisation, memory in use, power, temperature, and
whether its clocks are held down for heat or power (NVML's clock event reasons).

Every reading a card or driver does not give is None, never an error (gpus.py's rule). The
NVML is the driver's, or the stand-in's over DEPLOYTOOL_NVML_STANDIN's described host.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .nvml import nvml_library, optional

# Clock event reasons that mean the card is slowed for heat or power, not idle or by a setting.
THROTTLE_REASONS = {
    0x0000000000000004: "sw_power_cap",
    0x0000000000000008: "hw_slowdown",
    0x0000000000000020: "sw_thermal_slowdown",
    0x0000000000000040: "hw_thermal_slowdown",
    0x0000000000000080: "hw_power_brake_slowdown",
}


@dataclass
class CardNow:
    index: int
    uuid: str
    name: str
    utilization_pct: int | None = None
    memory_used_mib: int | None = None
    memory_total_mib: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: int | None = None
    throttle: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CardsNow:
    cards: list[CardNow]
    error: str | None = None  # why no card could be read (no driver, no NVML)
    source: str = "NVML"


def read_cards(nvml: Any = None) -> CardsNow:
    nvml = nvml if nvml is not None else nvml_library()
    if nvml is None:
        return CardsNow([], error="nvidia-ml-py is not installed")
    source = f"stand-in NVML over {nvml.described_host}" if getattr(nvml, "described_host", None) else "NVML"
    try:
        nvml.nvmlInit()
    except Exception as exc:  # no driver: said once, not a traceback per round
        return CardsNow([], error=f"NVML is not available ({type(exc).__name__})", source=source)
    try:
        count = optional(nvml.nvmlDeviceGetCount) or 0
        cards = [_card(nvml, index) for index in range(count)]
    finally:
        optional(nvml.nvmlShutdown)
    return CardsNow([c for c in cards if c is not None], source=source)


def _card(nvml: Any, index: int) -> CardNow | None:
    handle = optional(lambda: nvml.nvmlDeviceGetHandleByIndex(index))
    if handle is None:
        return None
    memory = optional(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
    rates = optional(lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
    power_mw = optional(lambda: nvml.nvmlDeviceGetPowerUsage(handle))
    limit_mw = optional(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle))
    reasons = optional(lambda: nvml.nvmlDeviceGetCurrentClocksEventReasons(handle))
    uuid, name = (
        optional(lambda: nvml.nvmlDeviceGetUUID(handle)),
        optional(lambda: nvml.nvmlDeviceGetName(handle)),
    )
    return CardNow(
        index=index,
        uuid=_text(uuid),
        name=_text(name),
        utilization_pct=int(rates.gpu) if rates is not None else None,
        memory_used_mib=int(memory.used) >> 20 if memory is not None else None,
        memory_total_mib=int(memory.total) >> 20 if memory is not None else None,
        power_w=power_mw / 1000 if power_mw is not None else None,
        power_limit_w=limit_mw / 1000 if limit_mw is not None else None,
        temperature_c=optional(lambda: nvml.nvmlDeviceGetTemperature(handle, 0)),  # NVML_TEMPERATURE_GPU
        throttle=[why for bit, why in THROTTLE_REASONS.items() if reasons and reasons & bit],
    )


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")
