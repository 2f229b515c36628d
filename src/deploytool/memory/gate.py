"""`up`'s memory check, split the way deploy is (deploy/facts.py -> deploy/plan.py -> executor):

    memory_facts()  reads what the check needs (the slot's card, the checkpoint's config), at
                    fact-gathering time; it refuses nothing and writes nothing.
    memory_check()  the pure decision plan_up makes before any step: fits, refused (nothing was
                    stopped), skipped with --skip-memory-plan, or nothing to judge by (a warning).

The executor journals the outcome (`memory_plan`, `memory_plan.skipped`) when the plan is
applied; `up --dry-run` prints it and journals nothing. A refusal raises MemoryRefused, which
carries the summary so that `up` can journal the refused plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import DeployError, DeploytoolError, UsageError
from ..profiles import Profile
from ..release.weights import ModelPlan
from .cards import Card, slot_card
from .checkpoint import ModelShape, read_checkpoint
from .profile_plan import StartupRefused, plan_from_shape, readable_config


@dataclass
class MemoryFacts:
    """What the memory check reads from the host: the card and the checkpoint's shape."""

    card: Card | None = None
    shape: ModelShape | None = None
    note: str | None = None  # why there is nothing to plan from (shown as a warning); None: silent


@dataclass
class MemoryCheck:
    """The decision: `summary` is what the journal's `memory_plan` event records."""

    summary: dict[str, Any] | None = None
    skipped: bool = False  # did not fit; --skip-memory-plan starts anyway
    warnings: list[str] = field(default_factory=list)

    def describe(self) -> str | None:
        s = self.summary
        if s is None:
            return None
        return (
            f"memory plan on {s['card']}: {s['pool_tokens']:,} KV tokens, {s['max_running_requests']} running "
            f"requests ({s['verdict']}{', --skip-memory-plan' if self.skipped else ''})"
        )


class MemoryRefused(DeployError):
    def __init__(
        self, message: str, *, summary: dict[str, Any], profile: str, hint: str | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.summary, self.profile = summary, profile


def memory_facts(
    slot: Any, profile: Profile, inventory: Any = None, weights: ModelPlan | None = None
) -> MemoryFacts:
    """Read the card and the checkpoint's config (config.json, safetensors index) when there
    is one here: in the hub snapshot or model.host_path, else model.path or model.config.
    `weights`: the profile's weights as `up` checked them (a hub snapshot is read only where that
    check found one: the weights are not looked at again here)."""
    folder = readable_config(
        profile, weights.checkpoint_folder() if weights and weights.kind == "hub" else None
    )
    if folder is None:
        note = (
            None
            if profile.is_simulator
            else (
                f"no memory plan: {profile.name}'s checkpoint config is not readable here "
                "(set model.host_path to check what fits before the start)"
            )
        )
        return MemoryFacts(note=note)
    card = slot_card(slot, profile, inventory)
    if card is None:
        return MemoryFacts(note=f"no memory plan: no card to plan {profile.name} for on slot {slot.name}")
    try:
        shape = read_checkpoint(folder)
    except DeploytoolError as exc:  # a config the planner cannot read is a warning, not a refusal
        return MemoryFacts(card=card, note=f"no memory plan: {exc.message}")
    return MemoryFacts(card=card, shape=shape)


def memory_check(memory: MemoryFacts | None, profile: Profile, *, skip: bool, slot: str) -> MemoryCheck:
    """Pure: plan `profile` on the card read; refuse (MemoryRefused) a plan that does not fit
    unless `skip`. A profile the planner cannot read (no mem-fraction-static, ...) is a warning."""
    if memory is None or memory.shape is None or memory.card is None:
        return MemoryCheck(warnings=[memory.note] if memory and memory.note else [])
    try:
        plan = plan_from_shape(profile, memory.card, memory.shape)
    except StartupRefused as exc:
        # SGLang would refuse the launch before sizing anything: refused like a plan that does not fit
        problems = [f"{n.line()} (SGLang: {n.sglang_says})" for n in exc.notes]
        summary = {
            "verdict": "error",
            "pool_tokens": 0,
            "max_running_requests": 0,
            "weights_gib": None,
            "card": memory.card.name,
            "problems": problems,
            "patches": [],
            "startup": [n.as_dict() for n in exc.notes],
        }
        if skip:
            return MemoryCheck(
                summary=summary,
                skipped=True,
                warnings=[
                    "--skip-memory-plan: starting although SGLang would refuse: " + "; ".join(problems)
                ],
            )
        raise MemoryRefused(
            f"profile {profile.name}: SGLang would refuse this launch at start-up on slot {slot} "
            f"({memory.card.name}); nothing was stopped:\n  " + "\n  ".join(problems),
            summary=summary,
            profile=profile.name,
            hint=exc.hint,
        ) from None
    except UsageError as exc:
        return MemoryCheck(warnings=[f"no memory plan: {exc.message}"])
    summary = {
        "verdict": plan.verdict,
        "pool_tokens": plan.pool_tokens,
        "max_running_requests": plan.max_running_requests,
        "weights_gib": plan.weights_gib,
        "card": plan.card,
        "problems": plan.problems,
        "patches": [p.split(":", 1)[0] for p in plan.patches],
        "startup": plan.startup,
        "max_mem_fraction_static": plan.max_mem_fraction_static,
        "mem_fraction_static": plan.mem_fraction_static,
    }
    changes = [
        f"SGLang will change {n['flag']}: asked {n['asked']}, will use {n['uses']} ({n['why']}); {n['fix']}"
        for n in plan.startup
        if n["kind"] == "change"
    ]
    if plan.fits:
        # above the edge the estimates allow for, the start may still die: said, not refused
        unsure = [w for w in plan.warnings if w.startswith("uncalibrated:")]
        return MemoryCheck(summary=summary, warnings=changes + unsure)
    if skip:
        return MemoryCheck(
            summary=summary,
            skipped=True,
            warnings=[
                "--skip-memory-plan: starting although the memory plan says: " + "; ".join(plan.problems)
            ],
        )
    raise MemoryRefused(
        f"profile {profile.name} does not fit slot {slot} ({plan.card}) by SGLang's memory accounting; "
        "nothing was stopped:\n  " + "\n  ".join(plan.problems),
        summary=summary,
        profile=profile.name,
        hint=f"`deploytool plan-memory --profile {profile.name}` shows the plan and tries changes with --set; "
        "--skip-memory-plan starts anyway (recorded in the journal)",
    )


def memory_refusal(profile: Profile, uuids: list[str], inventory: Any) -> str | None:
    """Why `up` would refuse `profile` on the slot of these cards by its memory check, as a
    reason line naming `plan-memory`; None when it would not (or has nothing to judge by)."""
    from ..host.slots import Slot

    slot = Slot(gpus=tuple(sorted(uuids)))
    try:
        memory_check(memory_facts(slot, profile, inventory), profile, skip=False, slot=slot.name)
    except MemoryRefused as exc:
        why = (
            "; ".join(exc.summary["problems"]) or exc.message
        )  # the problems it carries, not its text re-read
        return (
            f"by SGLang's memory accounting, as `up` and `plan-memory` judge it: {why} "
            f"(`deploytool plan-memory --profile {profile.name} --gpu {uuids[0]}`)"
        )
    return None


def slots_as_up_judges(profile: Profile, inventory: Any) -> Any:
    """The slots the host's cards make for `profile` (host/card_slots.py), each judged by the
    memory check `up` runs there too: a slot whose memory plan `up` and `plan-memory` refuse is
    incompatible, saying why, never runnable or runnable-with-less-memory."""
    from ..host.card_slots import plan_slots

    plan = plan_slots(profile, inventory)
    for offered in plan.slots:
        why = memory_refusal(profile, offered.uuids, inventory) if offered.verdict != "incompatible" else None
        if why:
            offered.verdict, offered.reasons = "incompatible", [*offered.reasons, why]
    return plan


def judged_fit(profile: Profile, cards: list[Any], inventory: Any) -> Any:
    """host/fit.py's verdict for one slot of these cards, with the memory check `up` runs there."""
    from ..host.fit import Fit, classify

    fit: Fit = classify(profile, cards)
    why = (
        memory_refusal(profile, [c.uuid for c in cards], inventory) if fit.verdict != "incompatible" else None
    )
    return Fit(fit.profile, "incompatible", [*fit.reasons, why]) if why else fit
