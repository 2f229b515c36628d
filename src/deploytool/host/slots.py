"""Deployment slots: where a release runs. The CPU slot is one; a set of cards is another (one slot
per set); a named CPU slot (`cpu-NAME`) is a further slot of the reference runtime, so that tests
and demos can run several slots side by side on one machine, each published on its own port, the
way two cards serve on two ports. A slot serves from one container at a time (a card holds one
copy of the model), and its releases are numbered 1, 2, 3, ... The options that name a slot are
read in cli/slot_options.py."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import FieldError
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


def gpu_slot(uuids: list[str]) -> Slot:
    """The slot of these cards, each a GPU (or MIG) UUID, none twice; sorted, so the same cards
    are the same slot whatever order they were named in."""
    for uuid in uuids:
        if not _UUID.match(uuid):
            raise FieldError(
                "gpus",
                "is not a GPU UUID (expected like GPU-5f3c0a8e-...)",
                value=repr(uuid),
                hint="`deploytool gpus` lists the UUIDs of this machine's cards",
            )
    if len(set(uuids)) != len(uuids):
        twice = next(uuid for uuid in uuids if uuids.count(uuid) > 1)
        raise FieldError("gpus", "the same UUID is given twice", value=repr(twice))
    return Slot(gpus=tuple(sorted(uuids)))


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
