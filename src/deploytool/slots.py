"""Deployment slots: where a release runs. `--cpu` is one slot; `--gpu UUID [--gpu UUID ...]`
is one slot per set of cards. A slot serves from one container at a time (a card holds one
copy of the model), and its releases are numbered 1, 2, 3, ..."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .errors import UsageError
from .labels import name_prefix

# Stopped releases a slot keeps (counting the rollback target); `up` prunes beyond it.
DEFAULT_RETENTION = 3

_UUID = re.compile(r"^(GPU|MIG)-[0-9a-fA-F-]{8,}$")


@dataclass(frozen=True)
class Slot:
    gpus: tuple[str, ...] = field(default_factory=tuple)  # empty for the CPU slot

    @property
    def is_cpu(self) -> bool:
        return not self.gpus

    @property
    def name(self) -> str:
        """Stable, Docker-safe: 'cpu' or 'gpu-<first 8 hex of each UUID>'."""
        if self.is_cpu:
            return "cpu"
        return "gpu-" + "-".join(u.split("-", 1)[1].replace("-", "")[:8].lower() for u in self.gpus)

    def project(self, release: int) -> str:
        """The compose project of one release: each release is its own project, so bringing
        up a new one never recreates or removes the previous one."""
        return f"{name_prefix()}-{self.name}-r{release}"

    def cache_volume(self) -> str:
        return f"{name_prefix()}-cache-{self.name}"


def slot_from_options(gpus: list[str] | None, cpu: bool) -> Slot:
    gpus = list(gpus or [])
    if cpu and gpus:
        raise UsageError("give either --cpu or --gpu UUID, not both")
    if not cpu and not gpus:
        raise UsageError("say which slot: --cpu, or --gpu UUID (repeat --gpu for several cards)",
                         hint="`deploytool gpus` lists the UUIDs of this machine's cards")
    for uuid in gpus:
        if not _UUID.match(uuid):
            raise UsageError(f"--gpu {uuid!r} is not a GPU UUID (expected like GPU-5f3c0a8e-...)",
                             hint="`deploytool gpus` lists the UUIDs of this machine's cards")
    if len(set(gpus)) != len(gpus):
        raise UsageError("the same --gpu UUID is given twice")
    # Sorted: the same cards are the same slot, whatever order the flags came in.
    return Slot(gpus=tuple(sorted(gpus)))
