"""What `bench` and `compare` are asked to do: frozen requests, every value checked where they
are built (the CLI, from its options), so that the library takes typed values and says which
field it could not use.

A bench measures an endpoint by URL or the release serving a slot; a comparison puts stored
runs side by side, measures two URLs with their passes interleaved, or measures the same
release on two slots (commands.py runs each)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import FieldError, UsageError
from ..host.slots import Slot

if TYPE_CHECKING:
    from ..checks.targets import TargetRequest
    from ..profiles import Profile
    from .method import BenchMethod


@dataclass(frozen=True)
class BenchRequest:
    """One `bench`: what to measure (a URL, or the release serving a slot, as qualify's target);
    the method's choices over the preset."""

    target: TargetRequest
    quick: bool = False
    thinking: bool = False
    sweep: bool = False
    workload: str = "table"
    repeats: int | None = None  # None: the method's (3)
    report_dir: Path | None = None  # None: a fresh folder under the state folder
    ready_timeout_s: float | None = None  # None: the profile's preflight setting

    def __post_init__(self) -> None:
        known_workload(self.workload)

    def method(self, profile: Profile | None) -> BenchMethod:
        """The preset, then the profile's `bench:` section, then this request's choices."""
        return method_for(
            profile,
            quick=self.quick,
            thinking=self.thinking,
            sweep=self.sweep,
            workload=self.workload,
            repeats=self.repeats,
        )


@dataclass(frozen=True)
class CompareRuns:
    """Stored runs (results.json files or the folders a bench report wrote), side by side."""

    runs: tuple[Path, ...]
    allow_mixed_methods: bool = False
    report_dir: Path | None = None


@dataclass(frozen=True)
class CompareInterleaved:
    """Two endpoints measured now, their passes alternating (A B, B A, ...), then compared."""

    urls: tuple[str, str]
    workload: str = "table"
    quick: bool = False
    repeats: int | None = None
    report_dir: Path | None = None

    def __post_init__(self) -> None:
        known_workload(self.workload)

    def method(self) -> BenchMethod:
        return method_for(
            None, quick=self.quick, thinking=False, sweep=False, workload=self.workload, repeats=self.repeats
        )


@dataclass(frozen=True)
class CompareSlots:
    """The same release on two slots: the source's two-card table, thinking off and on."""

    slots: tuple[Slot, ...]
    quick: bool = False
    repeats: int | None = None
    report_dir: Path | None = None
    profiles_dirs: tuple[Path, ...] | None = None

    def __post_init__(self) -> None:
        if len(self.slots) != 2 or self.slots[0].name == self.slots[1].name:
            raise UsageError(
                f"compare takes two different slots, got {len(self.slots)}: "
                f"{', '.join(s.name for s in self.slots)}",
                hint="deploytool compare --gpu UUID_A --gpu UUID_B (or --cpu-slot a --cpu-slot b)",
            )


CompareRequest = CompareRuns | CompareInterleaved | CompareSlots


def known_workload(name: str) -> None:
    from .workloads import REGISTRY

    if name not in REGISTRY:
        raise FieldError(
            "workload", "no such workload", value=repr(name), hint=f"known: {', '.join(REGISTRY)}"
        )


def method_for(
    profile: Profile | None, *, quick: bool, thinking: bool, sweep: bool, workload: str, repeats: int | None
) -> BenchMethod:
    from .presets import build_method

    return build_method(
        quick=quick,
        profile_bench=profile.bench if profile else None,
        thinking=thinking,
        sweep=sweep,
        profile_name=profile.name if profile else None,
        repeats=repeats,
        workload=workload,
    )
