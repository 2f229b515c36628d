"""What `plan-memory` is asked: one frozen request, its what-ifs parsed once where it is built
(the CLI, from its options: `PlanMemoryRequest.from_options`), so that the planner takes typed
values and says which field it could not use."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..errors import FieldError
from .what_if import parse_patches, parse_sets

# None: the profile's own patches; (): none; names: those; "series": every patch of the series file
PatchesChoice = tuple[str, ...] | Literal["series"] | None


@dataclass(frozen=True)
class PlanMemoryRequest:
    """One plan: the profile, the card (`gpu`: UUID[,UUID...] read through NVML, or `card`:
    NAME[:COUNT] of the table; neither: the profile's), the checkpoint folder instead of the
    profile's, and the what-ifs: launch flags replacing the profile's, and the patches assumed."""

    profile_name: str
    gpu: str | None = None
    card: str | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)  # SGLang flag (no leading --) -> value
    checkpoint: Path | None = None
    profiles_dirs: tuple[Path, ...] | None = None
    patches: PatchesChoice = None

    def __post_init__(self) -> None:
        if self.gpu and self.card:
            raise FieldError("card", "names the card the GPU's UUID already names: give one of the two")

    @classmethod
    def from_options(
        cls,
        profile_name: str,
        *,
        gpu: str | None = None,
        card: str | None = None,
        sets: list[str] | None = None,
        checkpoint: Path | None = None,
        profiles_dirs: list[Path] | None = None,
        patches: str | None = None,
    ) -> PlanMemoryRequest:
        """The request from the options as typed: `sets` as KEY=VALUE items (--set), `patches`
        as `none`, `series` or names separated by commas (--patches)."""
        names = parse_patches(patches)
        choice: PatchesChoice = (
            tuple(names) if names is not None else ("series" if patches is not None else None)
        )
        return cls(
            profile_name,
            gpu=gpu,
            card=card,
            overrides=parse_sets(sets),
            checkpoint=checkpoint,
            profiles_dirs=tuple(profiles_dirs) if profiles_dirs else None,
            patches=choice,
        )
