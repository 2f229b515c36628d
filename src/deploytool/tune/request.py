"""What `tune` is asked to do: one frozen request, its values parsed and checked where it is
built (the CLI, from its options), so that the search takes typed values and says which field
it could not use."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import FieldError, FieldSentenceError
from ..host.slots import Slot
from .space import Slo


@dataclass(frozen=True)
class TuneRequest:
    """One search: where its candidates run (`local` processes or the Docker `slot`), what it
    plans for and measures, and where it writes. `slo` holds the targets given for this search
    (None: the space's own); `budget` the seconds the search may take (None: no limit);
    `port_range` (local only) the FIRST, LAST ports a candidate serves on, None: any free port."""

    profile_name: str
    local: bool = False
    slot: Slot | None = None
    card: str | None = None  # NAME or NAME:COUNT of the card table; None: the slot's or the profile's
    workload: str | None = None  # None: the space's own
    slo: Slo = field(default_factory=Slo)
    space_file: Path | None = None
    budget: float | None = None  # seconds
    dry_run: bool = False
    resume: bool = False
    report_dir: Path | None = None  # None: a fresh folder under the state folder (not with resume)
    profiles_dirs: tuple[Path, ...] | None = None
    name: str | None = None  # the winner profile's; None: PROFILE-tuned
    qualify_winner: bool = True
    port_range: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if self.local and self.slot is not None:
            raise FieldError(
                "local", f"candidates run in one place: local processes or slot {self.slot.name}, not both"
            )
        if not self.local and self.slot is None and not self.dry_run:
            raise FieldError("local", "say where candidates run: local processes or a slot")
        if self.port_range is not None and not self.local:
            raise FieldSentenceError(
                "port_range", "is for --local: a slot's release serves on the slot's port"
            )
        if self.budget is not None and self.budget <= 0:
            raise FieldError("budget", "expected a time > 0", value=f"{self.budget:g}s")
        if self.resume and self.report_dir is None:
            raise FieldSentenceError(
                "resume",
                "needs the --report DIR of the search to go on with",
                hint="`deploytool reports` lists the tune reports kept under the state folder",
            )

    @property
    def profile_dirs(self) -> list[Path] | None:
        """The profile folders as the store takes them."""
        return list(self.profiles_dirs) if self.profiles_dirs is not None else None

    @property
    def where(self) -> str:
        """Where the candidates run, as the command line says it (for the report and a resume)."""
        if self.slot is not None:
            return self.slot.option
        return "--local" if self.local else "nowhere (--dry-run)"

    @property
    def gpu(self) -> str | None:
        """The card the plans are made for when the slot has cards (its first)."""
        return self.slot.gpus[0] if self.slot is not None and self.slot.gpus else None
