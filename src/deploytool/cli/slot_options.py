"""The slot a command names with --cpu, --cpu-slot NAME or --gpu UUID, read here once into the
Slot the library takes (host/slots.py): what to give, and what not to give together, is worded in
the options' own names, which only the CLI knows."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UsageError
from ..host.slots import Slot, cpu_slot_named, gpu_slot

if TYPE_CHECKING:
    from ..checks.targets import TargetRequest

_GPUS_HINT = "`deploytool gpus` lists the UUIDs of this machine's cards"


def slot_from_options(gpus: list[str] | None, cpu: bool, cpu_slot: str | None = None) -> Slot:
    gpus = list(gpus or [])
    if sum([bool(cpu), bool(gpus), cpu_slot is not None]) > 1:
        raise UsageError("give one slot: --cpu, --cpu-slot NAME or --gpu UUID, not both")
    if cpu_slot is not None:
        return cpu_slot_named(cpu_slot)
    if not cpu and not gpus:
        raise UsageError(
            "say which slot: --cpu, --cpu-slot NAME, or --gpu UUID (repeat --gpu for several cards)",
            hint=_GPUS_HINT,
        )
    return gpu_slot(gpus) if gpus else Slot()


def target_slot_from_options(
    url: str | None, gpus: list[str] | None, cpu: bool, cpu_slot: str | None = None
) -> Slot | None:
    """The slot qualify and bench measure: None for --url, which is refused beside a slot;
    without either, slot_from_options says which to give."""
    if url:
        if gpus or cpu or cpu_slot is not None:
            raise UsageError("give --url, or a slot (--cpu / --cpu-slot NAME / --gpu UUID), not both")
        return None
    return slot_from_options(gpus, cpu, cpu_slot)


def target_request_from_options(
    url: str | None,
    gpus: list[str] | None,
    cpu: bool,
    cpu_slot: str | None,
    *,
    profile: str | None,
    profiles_dir: list[Path] | None,
    api_key_file: Path | None,
    api_key: str | None,
    against: int | None = None,
) -> TargetRequest:
    """What qualify and bench measure, from the options they share: --url or a slot, the profile
    and where profiles are, the key's file (and a key typed on the command line, to be refused)."""
    from ..checks.targets import TargetRequest  # when a command measures: start-up stays light

    return TargetRequest(
        url=url,
        slot=target_slot_from_options(url, gpus, cpu, cpu_slot),
        profile_name=profile,
        profiles_dirs=tuple(profiles_dir) if profiles_dir else None,
        api_key_file=api_key_file,
        api_key_flag=api_key,
        against=against,
    )


def slots_from_options(cpu: bool, cpu_slots: list[str] | None, gpus: list[str] | None) -> list[Slot]:
    """The slots of a command that takes several (rollout, watch, compare), in the order the
    flags name them: --cpu, each --cpu-slot NAME, then each --gpu, one slot per flag (a
    multi-card slot is its UUIDs joined by commas)."""
    return [
        *([Slot()] if cpu else []),
        *(cpu_slot_named(name) for name in cpu_slots or []),
        *(slot_from_options(value.split(","), False) for value in gpus or []),
    ]
