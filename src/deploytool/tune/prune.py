"""Prune without starting: every candidate is planned by the memory planner (`plan-memory`'s
arithmetic) on the card it will run on; a launch that does not fit the card, or misses the
profile's own gates (a full-context conversation in the pool, the running requests preflight
asks for), is dropped with the planner's reason and is never started. The knobs SGLang couples
to the plan are filled in here (space.DERIVED)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import DeploytoolError, UsageError
from ..memory.cards import Card
from ..memory.profile_plan import checkpoint_folder, plan_for_profile
from ..profiles import Profile
from .space import Candidate, TuneSpace, with_args


@dataclass
class Planned:
    """A candidate after the planner: kept or pruned, with the plan's figures."""

    candidate: Candidate
    pruned: str | None = None  # why, when dropped
    pool_tokens: int | None = None
    running_limit: int | None = None
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        c = self.candidate
        return {"id": c.id, "changes": c.changes, "derived": c.derived, "pruned": self.pruned,
                "plan": {"kv_tokens": self.pool_tokens, "running_limit": self.running_limit,
                         "warnings": self.warnings}}


def plannable(profile: Profile) -> str | None:
    """Why the profile's candidates cannot be planned; None when they can."""
    if checkpoint_folder(profile) is None:
        if profile.is_simulator:
            return "the reference runtime loads no checkpoint (set model.host_path to a folder with a config.json)"
        return (f"no checkpoint config readable at model.host_path ({profile.model.host_path or 'not set'}) "
                f"or model.path ({profile.model.path})")
    return None


def plan_candidates(profile: Profile, cands: list[Candidate], space: TuneSpace, card: Card | None) -> tuple[list[Planned], str | None]:
    """Each candidate planned (derived knobs filled); the note says why nothing was planned."""
    why_not = plannable(profile) if card is not None else "no card to plan for"
    if why_not and not profile.is_simulator:
        raise UsageError(f"profile {profile.name}: candidates cannot be planned: {why_not}",
                         hint="tune plans every candidate before it starts one; give the checkpoint's config.json "
                              "(model.host_path) and the card (--card NAME or the profile's match.gpu_name)")
    out: list[Planned] = []
    for cand in cands:
        # the profile's own launch is measured as written: it is what every speedup is against
        if cand.id != "base":
            _derive_before_plan(cand, space)
        planned = Planned(cand)
        if why_not is None and card is not None:
            try:
                plan = plan_for_profile(cand.profile, card)
            except DeploytoolError as exc:
                planned.pruned = f"the planner refused it: {exc.message}"
                out.append(planned)
                continue
            planned.pool_tokens, planned.running_limit = plan.pool_tokens, plan.max_running_requests
            planned.warnings = list(plan.warnings)
            if not plan.fits:
                planned.pruned = "; ".join(plan.problems) or "does not fit"
        elif isinstance(cand.args.get("max-running-requests"), int):
            planned.running_limit = int(cand.args["max-running-requests"])
        if planned.pruned is None and cand.id != "base":
            _derive_after_plan(cand, space, planned.running_limit)
        out.append(planned)
    return out, why_not


def _derive_before_plan(cand: Candidate, space: TuneSpace) -> None:
    if "speculative-num-draft-tokens" in space.derived:
        steps = cand.args.get("speculative-num-steps")
        if isinstance(steps, int) and steps > 0:
            _set(cand, "speculative-num-draft-tokens", steps + 1)


def _derive_after_plan(cand: Candidate, space: TuneSpace, running_limit: int | None) -> None:
    if "cuda-graph-max-bs" in space.derived and running_limit:
        _set(cand, "cuda-graph-max-bs", int(running_limit))


def _set(cand: Candidate, name: str, value: Any) -> None:
    if cand.args.get(name) == value:
        return
    cand.derived[name] = value
    cand.profile = with_args(cand.profile, {**cand.args, name: value})
