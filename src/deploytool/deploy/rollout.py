"""`deploytool rollout`: upgrade several slots, never more than --max-unavailable out of service.

The image is built once; then each slot, in its turn, goes through the whole `up` path under
its own lock (facts gathered again, plan, execute with the gateway hooks: pre-stop drains it,
post-cutover puts it back). A failure restores that slot (the executor's restore) and stops
the rollout; with --undo-on-failure the slots it already upgraded are rolled back too, one at
a time. Every turn is journaled with the rollout's id (rollout.start, rollout.slot.start,
rollout.slot.done, rollout.slot.failed, rollout.done, rollout.failed, rollout.interrupted),
so an interrupted rollout can be continued (`--resume`) or undone (`--undo`) from the journal.
"""

from __future__ import annotations

import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import DeployError, DeploytoolError, Interrupted, UsageError
from ..host.engine import Engine
from ..host.nvml import refuse_on_described_host
from ..host.slots import Slot
from ..image.build import build
from ..profiles import Profile, ProfileStore
from ..release.compose import document_text
from ..release.state import journal, read_pointers, release_path, slot_lock
from .executor import as_failure, execute
from .facts import Facts, gather_facts, gather_slot
from .hooks import GatewayHooks, Hooks
from .no_engine import NoEngine
from .plan import bring_back, plan_rollback
from .reporter import Reporter
from .rollout_journal import last_rollout, upgraded_by
from .rollout_plan import RolloutPlan, RolloutRequest, card_slots, plan_rollout, slot_plan
from .steps import Plan, Stop
from .up_checks import choose_profile


@dataclass
class SlotOutcome:
    slot: str
    state: str  # upgraded, restored, untouched, rolled-back, failed (nothing serves)
    release: int | None  # what serves on the slot now
    previous: int | None  # what served before the rollout
    url: str | None = None
    message: str = ""
    report: str | None = None  # the new release's cutover report (its qualification's report.html)


@dataclass
class RolloutResult:
    id: str
    profile: str
    image: str
    ok: bool
    slots: list[SlotOutcome] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None

    def lines(self) -> list[str]:
        out = [
            f"rollout {self.id}: {self.profile} "
            + ("done" if self.ok else "stopped")
            + f" ({self.seconds} s)"
        ]
        for s in self.slots:
            was = f" (was {s.previous})" if s.previous is not None and s.previous != s.release else ""
            out.append(
                f"  slot {s.slot}: release {s.release or 'none'}{was} {s.state}"
                + (f" at {s.url}" if s.url else "")
                + (f": {s.message}" if s.message else "")
            )
        reports = [f"slot {s.slot}: {s.report}" for s in self.slots if s.report]
        if reports:  # last: what a person opens next
            out.append("cutover report" + ("s" if len(reports) > 1 else "") + ": " + "; ".join(reports))
        return out


class _SlotReporter(Reporter):
    """The rollout's reporter, each line saying which slot it is about."""

    def __init__(self, inner: Reporter, slot: str):
        self.inner, self.slot = inner, slot

    def step(self, message: str) -> None:
        self.inner.step(f"[{self.slot}] {message}")

    def waiting(self, label: str, elapsed: float, budget: float) -> None:
        self.inner.waiting(f"[{self.slot}] {label}", elapsed, budget)

    def warn(self, message: str) -> None:
        self.inner.warn(f"[{self.slot}] {message}")


@dataclass
class _Rollout:
    """What every slot's turn of one rollout needs, carried as one (as the executor's run)."""

    plan: RolloutPlan
    profile: Profile
    request: RolloutRequest
    engine: Engine
    reporter: Reporter
    hooks: Hooks
    outcomes: dict[str, SlotOutcome]

    @property
    def by_name(self) -> dict[str, Slot]:
        return {s.name: s for s in self.request.slots}


def new_rollout_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(2)


def _slot_facts(engine: Engine, slot: Slot, store: ProfileStore, name: str) -> tuple[Facts, Profile]:
    known = gather_slot(engine, slot)
    fallback = known.fallback
    profile = choose_profile(slot, name, fallback, store)
    facts = gather_facts(
        engine,
        slot,
        profile,
        host_port=fallback.host_port if fallback else None,
        bind=fallback.host_ip if fallback else "127.0.0.1",
        known=known,
    )
    return facts, profile


def plan_for_rollout(
    request: RolloutRequest, *, engine: Engine, rollout_id: str | None = None, done: list[str] | None = None
) -> tuple[RolloutPlan, Profile]:
    """Every slot's facts and plan, and the compose plugin's check of each rendered document:
    all refusals happen here, before any slot is touched. `--dry-run` prints this. The plan's
    request names every slot (--all-gpus planned from the cards)."""
    request, notes = _with_card_slots(request, engine)
    store = ProfileStore(request.profile_dirs)
    gathered = [_slot_facts(engine, slot, store, request.profile_name) for slot in request.slots]
    if isinstance(engine, NoEngine):
        # A rollout publishes each slot on the port its release has; with no engine to say which,
        # probing the profile's default port would refuse or pass for the wrong reason.
        for facts, _ in gathered:
            facts.port = None
    profile = gathered[0][1] if gathered else store.get(request.profile_name)
    plan = plan_rollout(
        [f for f, _ in gathered], profile, request, rollout_id=rollout_id or new_rollout_id(), done=done
    )
    by_name = {s.name: s for s in request.slots}
    for p in plan.slots:
        assert p.compose is not None and p.release is not None and p.profile is not None
        engine.compose_config(
            document_text(p.compose, profile=p.profile, slot=p.slot, release=p.release),
            project=by_name[p.slot].project(p.release),
        )
    plan.warnings += getattr(engine, "unchecked", [])  # a dry run without the docker CLI
    plan.notes += notes
    return plan, profile


def dry_run(request: RolloutRequest) -> RolloutPlan:
    """`rollout --dry-run`: the plan, from the engine when one answers, else from no engine."""
    from .no_engine import engine_for_dry_run

    return plan_for_rollout(request, engine=engine_for_dry_run())[0]


def _with_card_slots(request: RolloutRequest, engine: Engine) -> tuple[RolloutRequest, list[str]]:
    """--all-gpus: the slots this host's cards make for the profile, read through NVML (not the
    engine, which says only which slots serve a release now)."""
    if not request.all_gpus:
        return request, []
    from ..host.card_slots import plan_slots
    from ..host.gpus import require_inventory

    profile = ProfileStore(request.profile_dirs).get(request.profile_name)
    inventory = require_inventory(
        hint="--all-gpus reads this host's cards: give the slots with --gpu UUID, or roll out CPU slots "
        "with --cpu / --cpu-slot NAME"
    )
    serving = {r.slot for r in engine.releases() if r.gpus}
    return card_slots(request, plan_slots(profile, inventory), serving)


def rollout(
    request: RolloutRequest,
    *,
    reporter: Reporter | None = None,
    engine: Engine | None = None,
    hooks_dir: Path | None = None,
    rollout_id: str | None = None,
    done: list[str] | None = None,
) -> RolloutResult:
    refuse_on_described_host([s.name for s in request.slots if not s.is_cpu], "rollout")
    engine, reporter = engine or Engine(), reporter or Reporter()
    started = time.monotonic()
    plan, profile = plan_for_rollout(request, engine=engine, rollout_id=rollout_id, done=done)
    if request.all_gpus:  # the slots the cards make are known now
        refuse_on_described_host([s.name for s in plan.request.slots], "rollout")
    request = plan.request
    hooks = GatewayHooks(hooks_dir, reporter=reporter, context={"DEPLOYTOOL_ROLLOUT": plan.id})
    by_name = {s.name: s for s in request.slots}
    result = RolloutResult(id=plan.id, profile=profile.name, image=plan.image, ok=False)
    outcomes = {s.name: _untouched(engine, s) for s in request.slots}
    run = _Rollout(
        plan=plan,
        profile=profile,
        request=request,
        engine=engine,
        reporter=reporter,
        hooks=hooks,
        outcomes=outcomes,
    )
    for name in plan.done:
        outcomes[name].state = "upgraded"
    upgraded: list[str] = list(plan.done)
    journal(
        "rollout.resume" if done is not None else "rollout.start",
        rollout=plan.id,
        options=request.to_json(),
        image=plan.image,
        done=plan.done,
    )
    for note in plan.notes:
        reporter.note(note)
    for warning in plan.warnings:
        reporter.warn(warning)
    try:
        reporter.step(f"building the image for {profile.name} once, for every slot")
        reporter.step(build(profile, engine=engine).message)
        for wave in plan.waves:
            failures = _run_wave(run, wave)
            upgraded += [n for n in wave if outcomes[n].state == "upgraded"]
            if failures:
                raise failures[0]
    except (Exception, KeyboardInterrupt) as exc:
        failure = as_failure(exc)
        interrupted = isinstance(failure, Interrupted)
        journal(
            "rollout.interrupted" if interrupted else "rollout.failed",
            rollout=plan.id,
            upgraded=upgraded,
            reason=failure.message.splitlines()[0],
        )
        if request.undo_on_failure and upgraded and not interrupted:
            reporter.step(f"--undo-on-failure: rolling back {', '.join(upgraded)}")
            _undo(plan.id, [by_name[n] for n in upgraded], engine, reporter, hooks, outcomes)
        result.slots = [outcomes[s.name] for s in request.slots]
        result.seconds = round(time.monotonic() - started, 1)
        kind = Interrupted if interrupted else DeployError
        next_step = (
            "continue with `deploytool rollout --resume`, or undo it with `deploytool rollout --undo`"
            if not request.undo_on_failure or interrupted
            else None
        )
        result.error = failure.message.splitlines()[0]
        raise kind(
            "\n".join([failure.message.splitlines()[0], *result.lines()[1:]]),
            hint=next_step or failure.hint,
            details=result,
        ) from None
    journal("rollout.done", rollout=plan.id, slots={n: outcomes[n].release for n in outcomes})
    result.ok, result.slots = True, [outcomes[s.name] for s in request.slots]
    result.seconds = round(time.monotonic() - started, 1)
    return result


def _untouched(engine: Engine, slot: Slot) -> SlotOutcome:
    facts = gather_slot(engine, slot)
    serving = facts.serving
    return SlotOutcome(
        slot=slot.name,
        state="untouched",
        release=serving.release if serving else None,
        previous=serving.release if serving else None,
        url=serving.url if serving else None,
    )


def _run_wave(run: _Rollout, wave: list[str]) -> list[DeploytoolError]:
    """The wave's slots together (one at a time with --max-unavailable 1); the failures."""

    def one(name: str) -> DeploytoolError | None:
        try:
            _upgrade(run, name)
        except DeploytoolError as exc:
            return exc
        return None

    if len(wave) == 1:
        errors = [one(wave[0])]
    else:
        with ThreadPoolExecutor(max_workers=len(wave)) as pool:
            errors = list(pool.map(one, wave))
    return [e for e in errors if e is not None]


def _upgrade(run: _Rollout, name: str) -> None:
    """One slot's turn: the whole `up` path under its lock, its outcome and journal lines."""
    slot, canary, rollout_id = run.by_name[name], name == run.plan.canary, run.plan.id
    profile, engine, hooks, outcome = run.profile, run.engine, run.hooks, run.outcomes[name]
    reporter = _SlotReporter(run.reporter, name)
    with slot_lock(slot.name, f"rollout {rollout_id}"):
        facts = _settle(slot, profile, engine, reporter)
        plan = slot_plan(facts, profile, run.request, canary=canary)
        assert plan.release is not None  # an up plan always makes a new release
        reporter.step(
            f"{'canary' if canary else 'slot'} {slot.name}: release {plan.serving or 'none'} -> "
            f"{plan.release}"
        )
        journal(
            "rollout.slot.start",
            rollout=rollout_id,
            slot=slot.name,
            release=plan.release,
            previous=plan.fallback,
            canary=canary,
        )
        html = release_path(slot.name, plan.release) / "qualify" / "report.html"
        try:
            done = execute(plan, slot=slot, engine=engine, reporter=reporter, hooks=hooks)
        except DeploytoolError as exc:
            outcome.report = str(html) if html.exists() else None
            after = gather_slot(engine, slot).serving
            outcome.release, outcome.url = (after.release, after.url) if after else (None, None)
            outcome.state = "restored" if after is not None else "failed"
            outcome.message = exc.message.splitlines()[0]
            journal(
                "rollout.slot.failed",
                rollout=rollout_id,
                slot=slot.name,
                release=plan.release,
                serving=outcome.release,
                reason=outcome.message,
            )
            raise
        assert done.serving is not None
        outcome.state, outcome.release, outcome.url = "upgraded", plan.release, done.serving.url
        outcome.report = str(html) if html.exists() else None
        journal(
            "rollout.slot.done",
            rollout=rollout_id,
            slot=slot.name,
            release=plan.release,
            previous=plan.fallback,
        )


def _settle(slot: Slot, profile: Profile, engine: Engine, reporter: Reporter) -> Facts:
    """After a crash of deploytool mid-up, the slot may serve a release that was never cut
    over, or nothing: bring its current release back first, so the up starts from a slot that
    serves what its pointers say."""
    facts = gather_slot(engine, slot)
    current = facts.by_number(facts.pointers.current)
    serving = facts.serving
    if current is None or (serving is not None and serving.release == current.release):
        anchor = serving or current
        return gather_facts(
            engine,
            slot,
            profile,
            host_port=anchor.host_port if anchor else None,
            bind=anchor.host_ip if anchor else "127.0.0.1",
        )
    steps = (
        [
            Stop(
                release=serving.release,
                container=serving.container_name,
                reason="never cut over",
                only_if_running=True,
            )
        ]
        if serving
        else []
    ) + bring_back(facts, current)
    reporter.step(
        f"release {current.release} is the slot's current release but "
        f"{'release ' + str(serving.release) if serving else 'nothing'} serves: bringing it back"
    )
    journal(
        "rollout.settle",
        slot=slot.name,
        release=current.release,
        stopped=serving.release if serving else None,
    )
    execute(
        Plan(
            action="up",
            slot=slot.name,
            release=current.release,
            serving=None,
            fallback=None,
            steps=steps,
            url=current.url,
            profile=current.profile,
        ),
        slot=slot,
        engine=engine,
        reporter=reporter,
    )
    return gather_facts(engine, slot, profile, host_port=current.host_port, bind=current.host_ip)


def _undo(
    rollout_id: str,
    slots: list[Slot],
    engine: Engine,
    reporter: Reporter,
    hooks: Hooks,
    outcomes: dict[str, SlotOutcome] | None = None,
) -> list[str]:
    """Roll back, last first and one at a time, the slots this rollout upgraded and that
    still serve its release; returns the problems (a slot someone else changed is left)."""
    made = upgraded_by(rollout_id)
    problems = []
    for slot in reversed(slots):
        pointers = read_pointers(slot.name)
        if made.get(slot.name) is None or pointers.current != made[slot.name]:
            problems.append(
                f"slot {slot.name}: serves release {pointers.current}, not this rollout's; left alone"
            )
            continue
        try:
            with slot_lock(slot.name, f"rollout {rollout_id} undo"):
                plan = plan_rollback(gather_slot(engine, slot))
                done = execute(
                    plan, slot=slot, engine=engine, reporter=_SlotReporter(reporter, slot.name), hooks=hooks
                )
        except DeploytoolError as exc:
            problems.append(f"slot {slot.name}: {exc.message.splitlines()[0]}")
            continue
        journal(
            "rollout.slot.undone",
            rollout=rollout_id,
            slot=slot.name,
            release=plan.release,
            stopped=made[slot.name],
        )
        if outcomes is not None and done.serving is not None:
            outcomes[slot.name].state, outcomes[slot.name].release = "rolled-back", plan.release
            outcomes[slot.name].url = done.serving.url
    return problems


# -- --resume and --undo, from the journal (rollout_journal.py reads it) ---------------------------
def resume(
    *, reporter: Reporter | None = None, engine: Engine | None = None, hooks_dir: Path | None = None
) -> RolloutResult:
    last = last_rollout()
    if last.finished:
        raise UsageError(f"the last rollout ({last.id}) has nothing to resume: {last.finished}")
    return rollout(
        last.options,
        reporter=reporter,
        engine=engine,
        hooks_dir=hooks_dir,
        rollout_id=last.id,
        done=last.done,
    )


def undo(
    *, reporter: Reporter | None = None, engine: Engine | None = None, hooks_dir: Path | None = None
) -> dict[str, Any]:
    last = last_rollout()
    if last.finished == "rollout.undone":
        raise UsageError(f"the last rollout ({last.id}) is already undone")
    engine, reporter = engine or Engine(), reporter or Reporter()
    hooks = GatewayHooks(hooks_dir, reporter=reporter, context={"DEPLOYTOOL_ROLLOUT": last.id})
    by_name = {s.name: s for s in last.options.slots}
    outcomes = {s.name: _untouched(engine, s) for s in last.options.slots}
    problems = _undo(last.id, [by_name[n] for n in last.done], engine, reporter, hooks, outcomes)
    journal("rollout.undone", rollout=last.id, problems=problems)
    return {"id": last.id, "slots": [outcomes[s.name] for s in last.options.slots], "problems": problems}
