"""`up`, `rollback` and `prune`: gather the facts, plan, and either print the plan
(`--dry-run`) or hold the slot's lock and execute it.

A slot serves from one container at a time (a card holds one copy of the model), so an up
is: build (a no-op when the inputs are unchanged), record the release, stop the serving
release (kept for rollback), prepare the JIT cache, start the new release, wait until it is
healthy, qualify it, cut over, prune. Any failure after the hand-over began stops the new
release (kept for inspection) and brings the previous one back, verified healthy.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError
from ..host.engine import Engine
from ..host.nvml import refuse_on_described_host
from ..host.slots import Slot
from ..memory.gate import MemoryRefused
from ..profiles import ProfileStore
from ..release.cache import CacheDecision
from ..release.compose import document_text
from ..release.state import journal, slot_lock
from .executor import execute
from .facts import gather_facts, gather_slot
from .hooks import Hooks
from .plan import DEFAULT_RETENTION, plan_prune, plan_rollback, plan_up
from .reporter import Reporter
from .steps import CutOver, Plan
from .up_checks import UpOptions, choose_profile, publish_port


@dataclass
class UpResult:
    slot: str
    release: int
    profile: str
    image: str
    url: str
    previous: int | None
    built: bool
    cache: CacheDecision | None
    qualify: dict[str, Any] | None
    qualify_skipped: bool
    pruned: list[int] = field(default_factory=list)
    seconds: float = 0.0
    model: dict[str, Any] | None = None  # the weights it serves (weights.ModelPlan.record)
    drains: list[dict[str, Any]] = field(default_factory=list)  # the hand-over's drain (drain.Drain)


@dataclass
class RollbackResult:
    slot: str
    release: int  # now serving
    stopped: int  # the release rolled back from
    url: str
    seconds: float
    drains: list[dict[str, Any]] = field(default_factory=list)  # the stop's drain (drain.Drain)


@dataclass
class PruneResult:
    slot: str
    pruned: list[int]
    retention: int


def plan_for_up(slot: Slot, options: UpOptions, *, engine: Engine) -> Plan:
    """Facts, then the plan, then the compose plugin's own check of the rendered document:
    every refusal happens here, before anything is stopped or written (a missing compose
    plugin at its check, before any image is built)."""
    store = ProfileStore(list(options.profiles_dirs) if options.profiles_dirs else None)
    known = gather_slot(engine, slot)
    fallback = known.fallback
    profile = choose_profile(slot, options.profile_name, fallback, store)
    facts = gather_facts(
        engine,
        slot,
        profile,
        host_port=publish_port(options, fallback, profile)[0],
        bind=options.bind,
        wheelhouse=options.wheelhouse,
        publishes=options.publishes,
        known=known,
    )
    plan = plan_up(facts, profile, options)
    assert plan.compose is not None and plan.release is not None
    checked = engine.compose_config(
        document_text(plan.compose, profile=profile.name, slot=slot.name, release=plan.release),
        project=slot.project(plan.release),
    )
    if checked:  # empty: a dry run without the docker CLI, said by a warning instead
        plan.checks.append(
            "compose document: `docker compose config` accepts it"
            + ("" if slot.is_cpu else f" (with its reservation of {', '.join(slot.gpus)})")
        )
    plan.warnings.extend(getattr(engine, "unchecked", []))  # a dry run without the docker CLI
    return plan


def up(
    slot: Slot,
    options: UpOptions | None = None,
    *,
    reporter: Reporter | None = None,
    engine: Engine | None = None,
    hooks: Hooks | None = None,
    **kwargs: Any,
) -> UpResult:
    options = options or UpOptions(**kwargs)
    refuse_on_described_host([] if slot.is_cpu else [slot.name], "up")
    engine = engine or Engine()
    with slot_lock(slot.name, "up"):
        try:
            plan = plan_for_up(slot, options, engine=engine)
        except MemoryRefused as refused:  # the refused plan is journaled (a --dry-run journals nothing)
            journal("memory_plan", slot=slot.name, release=None, profile=refused.profile, **refused.summary)
            raise
        if plan.not_on_cards:  # planned (a dry run shows it), never started on a card
            raise UsageError(
                f"profile {plan.profile} builds a CPU image (image.cuda: null): it cannot serve on "
                f"slot {slot.name}'s card; nothing was stopped",
                hint="set image.cuda (a GPU image) to deploy it on cards; `deploytool cpu-twin` starts "
                "this release's CPU twin",
            )
        outcome = execute(plan, slot=slot, engine=engine, reporter=reporter, hooks=hooks)
    cutover = next(s for s in plan.steps if isinstance(s, CutOver))
    assert plan.release is not None and plan.profile is not None and outcome.serving is not None
    return UpResult(
        slot=slot.name,
        release=plan.release,
        profile=plan.profile,
        image=plan.image or "",
        url=outcome.serving.url,
        previous=cutover.previous,
        built=bool(outcome.built and outcome.built.built),
        cache=outcome.cache,
        qualify=outcome.qualify,
        qualify_skipped=options.skip_qualify,
        pruned=outcome.pruned,
        seconds=outcome.seconds,
        model=plan.model,
        drains=outcome.drains,
    )


def plan_for_rollback(
    slot: Slot, *, engine: Engine | None = None, drain_timeout: float | None = None, take_over: bool = False
) -> Plan:
    return plan_rollback(gather_slot(engine or Engine(), slot), drain_timeout, take_over=take_over)


def rollback(
    slot: Slot,
    *,
    reporter: Reporter | None = None,
    engine: Engine | None = None,
    hooks: Hooks | None = None,
    drain_timeout: float | None = None,
    take_over: bool = False,
) -> RollbackResult:
    engine = engine or Engine()
    started = time.monotonic()
    with slot_lock(slot.name, "rollback"):
        plan = plan_for_rollback(slot, engine=engine, drain_timeout=drain_timeout, take_over=take_over)
        outcome = execute(plan, slot=slot, engine=engine, reporter=reporter, hooks=hooks)
    cutover = next(s for s in plan.steps if isinstance(s, CutOver))
    assert plan.release is not None and cutover.previous is not None and outcome.serving is not None
    return RollbackResult(
        slot=slot.name,
        release=plan.release,
        stopped=cutover.previous,
        url=outcome.serving.url,
        seconds=round(time.monotonic() - started, 2),
        drains=outcome.drains,
    )


def plan_for_prune(slot: Slot, retention: int = DEFAULT_RETENTION, *, engine: Engine | None = None) -> Plan:
    return plan_prune(gather_slot(engine or Engine(), slot), retention)


def prune(
    slot: Slot,
    retention: int = DEFAULT_RETENTION,
    *,
    reporter: Reporter | None = None,
    engine: Engine | None = None,
) -> PruneResult:
    """Remove stopped releases beyond `retention`, oldest first; never the current release
    or the rollback target. Their rendered files and reports stay in the state directory."""
    engine = engine or Engine()
    with slot_lock(slot.name, "prune"):
        plan = plan_for_prune(slot, retention, engine=engine)
        outcome = execute(plan, slot=slot, engine=engine, reporter=reporter)
    return PruneResult(slot=slot.name, pruned=outcome.pruned, retention=retention)
