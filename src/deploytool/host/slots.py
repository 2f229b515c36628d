"""Deployment slots: where a release runs. `--cpu` is one slot; `--gpu UUID [--gpu UUID ...]`
is one slot per set of cards; `--cpu-slot NAME` is a further CPU slot of the reference
runtime (slot `cpu-NAME`), so that tests and demos can run several slots side by side on one
machine, each published on its own `--port`, the way two cards serve on two ports. A slot serves from one container at a time (a card holds one
copy of the model), and its releases are numbered 1, 2, 3, ..."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import FieldError, UsageError
from ..host.labels import name_prefix

# Stopped releases a slot keeps (counting the rollback target); `up` prunes beyond it.
DEFAULT_RETENTION = 3

_UUID = re.compile(r"^(GPU|MIG)-[0-9a-fA-F-]{8,}$")
_CPU_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,15}$")


@dataclass(frozen=True)
class Slot:
    gpus: tuple[str, ...] = field(default_factory=tuple)  # empty for a CPU slot
    cpu_name: str | None = None  # a named CPU slot (`--cpu-slot NAME`); None: the CPU slot "cpu"

    @property
    def is_cpu(self) -> bool:
        return not self.gpus

    @property
    def name(self) -> str:
        """Stable, Docker-safe: 'cpu' or 'gpu-<first 8 hex of each UUID>'."""
        if self.is_cpu:
            return f"cpu-{self.cpu_name}" if self.cpu_name else "cpu"
        return "gpu-" + "-".join(u.split("-", 1)[1].replace("-", "")[:8].lower() for u in self.gpus)

    @property
    def option(self) -> str:
        """The flags that name this slot on the command line (for the commands an answer suggests)."""
        if self.is_cpu:
            return f"--cpu-slot {self.cpu_name}" if self.cpu_name else "--cpu"
        return " ".join(f"--gpu {u}" for u in self.gpus)

    def project(self, release: int) -> str:
        """The compose project of one release: each release is its own project, so bringing
        up a new one never recreates or removes the previous one."""
        return f"{name_prefix()}-{self.name}-r{release}"

    def cache_volume(self) -> str:
        return f"{name_prefix()}-cache-{self.name}"


def slot_from_options(gpus: list[str] | None, cpu: bool, cpu_slot: str | None = None) -> Slot:
    gpus = list(gpus or [])
    if sum([bool(cpu), bool(gpus), cpu_slot is not None]) > 1:
        raise UsageError("give one slot: --cpu, --cpu-slot NAME or --gpu UUID, not both")
    if cpu_slot is not None:
        return cpu_slot_named(cpu_slot)
    if not cpu and not gpus:
        raise UsageError(
            "say which slot: --cpu, --cpu-slot NAME, or --gpu UUID (repeat --gpu for several cards)",
            hint="`deploytool gpus` lists the UUIDs of this machine's cards",
        )
    for uuid in gpus:
        if not _UUID.match(uuid):
            raise FieldError(
                "gpus",
                "is not a GPU UUID (expected like GPU-5f3c0a8e-...)",
                value=repr(uuid),
                hint="`deploytool gpus` lists the UUIDs of this machine's cards",
            )
    if len(set(gpus)) != len(gpus):
        twice = next(uuid for uuid in gpus if gpus.count(uuid) > 1)
        raise FieldError("gpus", "the same UUID is given twice", value=repr(twice))
    # Sorted: the same cards are the same slot, whatever order the flags came in.
    return Slot(gpus=tuple(sorted(gpus)))


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


def slots_from_options(cpu: bool, cpu_slots: list[str] | None, gpus: list[str] | None) -> list[Slot]:
    """The slots of a command that takes several (rollout, watch, compare), in the order the
    flags name them: --cpu, each --cpu-slot NAME, then each --gpu, one slot per flag (a
    multi-card slot is its UUIDs joined by commas)."""
    return (
        ([Slot()] if cpu else [])
        + [cpu_slot_named(name) for name in cpu_slots or []]
        + [slot_from_options(value.split(","), False) for value in gpus or []]
    )


def cpu_slot_named(name: str) -> Slot:
    if not _CPU_NAME.match(name):
        raise FieldError(
            "cpu_slot",
            "expected a short name of lowercase letters, digits and '-' (up to 16), e.g. a",
            value=repr(name),
        )
    return Slot(cpu_name=name)


def slot_named(name: str, gpus: list[str]) -> Slot:
    """A slot again from what the engine's labels say: its name and its cards."""
    if gpus:
        return Slot(gpus=tuple(sorted(gpus)))
    return Slot(cpu_name=name[4:]) if name.startswith("cpu-") else Slot()
