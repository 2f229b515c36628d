"""`deploytool profiles check --checkpoint DIR`: a profile's launch checked by SGLang's own code
with the checkpoint's config (the flag probe builds SGLang's server arguments and model
configuration in the image, or the parser venv), beside the start-up rules that need the card or
the pool, which the planner says (startup.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import DeploytoolError
from ..image import flagcheck
from ..profiles import Profile
from .cards import profile_card
from .checkpoint import read_checkpoint
from .profile_plan import StartupRefused, plan_for_profile


@dataclass
class StartupCheck:
    flags: flagcheck.FlagCheck
    notes: list[dict[str, Any]] = field(default_factory=list)  # startup.StartupNote.as_dict()
    plan_note: str | None = None  # why the planner's rules could not be applied

    @property
    def ok(self) -> bool:
        return self.flags.ok and not any(n["kind"] == "refuse" for n in self.notes)

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.flags.__dict__,
            "ok": self.ok,
            "startup_rules": self.notes,
            "startup_rules_note": self.plan_note,
        }


def check_with_checkpoint(
    profile: Profile, checkpoint: Path, *, use_image: bool = True, wheelhouse: Path | None = None
) -> StartupCheck:
    flags = flagcheck.check(profile, use_image=use_image, wheelhouse=wheelhouse, checkpoint=checkpoint)
    result = StartupCheck(flags=flags)
    if not profile.match.gpu_name:
        result.plan_note = (
            "the profile names no card (match.gpu_name): the rules that need one are not applied"
        )
        return result
    try:
        card = profile_card(profile)
        plan = plan_for_profile(profile, card, shape=read_checkpoint(checkpoint))
        result.notes = plan.startup
    except StartupRefused as exc:
        result.notes = [n.as_dict() for n in exc.notes]
    except DeploytoolError as exc:
        result.plan_note = f"the planner's start-up rules not applied: {exc.message}"
    return result
