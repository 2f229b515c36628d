"""`up`'s memory gate: plan the profile on the slot's card before anything is stopped, and
refuse a plan that does not fit (unless --skip-memory-plan, which the journal records)."""

from __future__ import annotations

from typing import Any

from ..errors import DeployError, UsageError
from ..profiles import Profile
from ..state import journal
from .cards import Card, card_from_gpu, card_from_table
from .plan import MemoryPlan
from .profile_plan import check_memory_fit, checkpoint_folder


def slot_card(slot: Any, profile: Profile, inventory: Any = None) -> Card | None:
    """The slot's first card through NVML; on the CPU slot (the reference runtime standing in
    for a GPU server) the profile's own card from the table, when it names one."""
    if not slot.is_cpu:
        from ..gpus import read_inventory

        inventory = inventory or read_inventory()
        gpu = None if inventory.error else inventory.by_uuid(slot.gpus[0])
        return card_from_gpu(gpu, count=len(slot.gpus)) if gpu is not None else None
    if profile.match.gpu_name:
        return card_from_table(profile.match.gpu_name[0], count=profile.match.gpu_count)
    return None


def memory_gate(slot: Any, profile: Profile, *, skip: bool, release: int, reporter: Any) -> MemoryPlan | None:
    """Run the plan; raise a DeployError when it does not fit and `skip` is not set."""
    if checkpoint_folder(profile) is None:
        if not profile.is_simulator:
            reporter.warn(f"no memory plan: {profile.name}'s checkpoint config is not readable here "
                          "(set model.host_path to check what fits before the start)")
        return None
    card = slot_card(slot, profile)
    if card is None:
        reporter.warn(f"no memory plan: no card to plan {profile.name} for on slot {slot.name}")
        return None
    try:
        plan = check_memory_fit(profile, card)
    except UsageError as exc:  # a profile the planner cannot read (no mem-fraction-static, ...)
        reporter.warn(f"no memory plan: {exc.message}")
        return None
    if plan is None:
        return None
    summary = {"verdict": plan.verdict, "pool_tokens": plan.pool_tokens,
               "max_running_requests": plan.max_running_requests, "weights_gib": plan.weights_gib,
               "card": plan.card, "problems": plan.problems}
    journal("memory_plan", slot=slot.name, release=release, profile=profile.name, **summary)
    reporter.step(f"memory plan on {plan.card}: {plan.pool_tokens:,} KV tokens, {plan.max_running_requests} running "
                  f"requests ({plan.verdict})")
    if plan.fits:
        return plan
    if skip:
        reporter.warn("--skip-memory-plan: starting although the memory plan says: " + "; ".join(plan.problems))
        journal("memory_plan.skipped", slot=slot.name, release=release, profile=profile.name,
                reason="--skip-memory-plan", problems=plan.problems)
        return plan
    raise DeployError(
        f"profile {profile.name} does not fit slot {slot.name} ({plan.card}) by SGLang's memory accounting; "
        "nothing was stopped:\n  " + "\n  ".join(plan.problems),
        hint=f"`deploytool plan-memory --profile {profile.name}` shows the plan and tries changes with --set; "
             "--skip-memory-plan starts anyway (recorded in the journal)")
