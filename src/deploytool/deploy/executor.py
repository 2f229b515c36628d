"""One executor for every deploy plan: apply the steps in order through the engine, journal
each, report through one Reporter, and when a step fails (or Ctrl-C) after the hand-over
began, run the plan's restore steps and say what serves now.

The executor decides nothing a plan did not say, except what only the engine can tell when
the step runs (is the image there now, what does the cache volume hold now). A rollout
drives several slots' plans through it one after another; `Hooks` (hooks.py) are called at
every step boundary: `pre-stop` is `before_step` of a Stop, `post-cutover` and
`post-rollback` are `after_step` of a CutOver, `on-failure` is `on_failure`, and a restore
that brought the previous release back calls `after_restore` (a `post-rollback`). What each
step does through the engine is step_effects.py's.
"""

from __future__ import annotations

import time
from typing import NoReturn

from ..errors import DeployError, DeploytoolError, Interrupted
from ..host.engine import Engine
from ..host.slots import Slot
from ..release.state import journal
from . import scrape_targets
from .hooks import Hooks
from .reporter import Reporter
from .step_effects import APPLY, Outcome, Run
from .steps import CutOver, Plan, Remove, Start, Step, Stop, WaitHealthy


def execute(
    plan: Plan, *, slot: Slot, engine: Engine, reporter: Reporter | None = None, hooks: Hooks | None = None
) -> Outcome:
    """Apply `plan` (the caller holds the slot's lock); what its steps need of the profile
    they carry. Raises a DeploytoolError saying what failed and what serves now; Ctrl-C raises
    Interrupted (exit 130) after the restore."""
    started = time.monotonic()
    reporter, hooks = reporter or Reporter(), hooks or Hooks()
    run = Run(plan, slot, engine, reporter, Outcome(plan))
    for warning in plan.warnings:
        reporter.warn(warning)
    for check in plan.checks:
        reporter.step(check)
    _journal_start(plan)
    handed_over = False  # once a release was stopped or started, a failure must restore
    fallback_removed = False  # ... unless the plan itself removed the release a restore would bring back
    current: Step | None = None
    try:
        for current in plan.steps:
            hooks.before_step(plan, current)  # a refused pre-stop: the Stop never began
            _journal_step(plan, current)
            handed_over = handed_over or isinstance(current, (Stop, Start))
            APPLY[type(current)](run, current)
            fallback_removed = fallback_removed or (
                isinstance(current, Remove) and current.release == plan.fallback
            )
            if isinstance(current, (Stop, Start, WaitHealthy, CutOver)):
                _follow_monitor(run)
            hooks.after_step(plan, current)
    except (Exception, KeyboardInterrupt) as exc:
        failure = as_failure(exc, current)
        if not handed_over:  # nothing was stopped or started: nothing to restore
            hooks.on_failure(plan, failure)
            if isinstance(exc, DeploytoolError):
                raise
            raise failure from None
        journal(
            f"{plan.action}.failed",
            slot=plan.slot,
            release=plan.release,
            reason=failure.message.splitlines()[0],
        )
        hooks.on_failure(plan, failure)
        if fallback_removed:  # `down` past its release's removal: nothing is to serve, as asked
            raise _kind(failure)(
                f"{_headline(plan, failure)}\n  release {plan.fallback} was removed before "
                f"that, as planned: nothing serves on slot {plan.slot}",
                hint=failure.hint,
            ) from None
        _restore(run, failure, hooks)
    run.outcome.seconds = round(time.monotonic() - started, 1)
    return run.outcome


def _follow_monitor(run: Run) -> None:
    """The monitor's scrape targets follow every stop, start and cut-over (deploy/scrape_targets.py):
    a release stopped for an upgrade leaves the targets before its scrape fails, the new one
    joins once healthy (after its WaitHealthy), not while it loads. A monitor that cannot be told
    is a warning, never a failed deploy."""
    try:
        if scrape_targets.monitored():  # no engine call on a host without a monitor
            scrape_targets.write_targets(run.engine.releases())
    except Exception as exc:
        run.reporter.warn(f"the monitor's scrape targets were not rewritten: {exc}")


def as_failure(exc: BaseException, step: Step | None = None) -> DeploytoolError:
    """Any exception as an error a person can read; Ctrl-C names the step it stopped."""
    if isinstance(exc, DeploytoolError):
        return exc
    if isinstance(exc, KeyboardInterrupt):
        return Interrupted("interrupted (Ctrl-C)" + (f" during: {step.describe()}" if step else ""))
    return DeployError(f"unexpected {type(exc).__name__}: {exc}")


def _journal_start(plan: Plan) -> None:
    if (
        plan.memory is not None
    ):  # what the memory plan said, and an override of it, for whoever reads why a start failed
        summary = {k: v for k, v in plan.memory.items() if k != "skipped"}
        journal("memory_plan", slot=plan.slot, release=plan.release, profile=plan.profile, **summary)
        if plan.memory.get("skipped"):
            journal(
                "memory_plan.skipped",
                slot=plan.slot,
                release=plan.release,
                profile=plan.profile,
                reason="--skip-memory-plan",
                problems=summary.get("problems"),
            )
    if plan.action == "up":
        journal(
            "up.start",
            slot=plan.slot,
            release=plan.release,
            profile=plan.profile,
            image=plan.image,
            previous=plan.fallback,
            skip_qualify=plan.skip_qualify,
            model=(plan.model or {}).get("identity"),
        )
        if plan.skip_qualify:
            journal("qualify.skipped", slot=plan.slot, release=plan.release, reason="--skip-qualify")
        if (plan.record or {}).get("exposed_without_key"):
            journal(
                "exposed_without_key",
                slot=plan.slot,
                release=plan.release,
                bind=(plan.record or {}).get("bind"),
                reason="--expose-without-key: published beyond loopback without an API key",
            )
    elif plan.action in ("rollback", "stop", "start", "down"):
        journal(f"{plan.action}.start", slot=plan.slot, release=plan.release, current=plan.serving)


def _journal_step(plan: Plan, step: Step, *, restore: bool = False) -> None:
    """Each step as it begins: the journal reads as the plan applied (a resumable record)."""
    journal(
        "step",
        slot=plan.slot,
        release=plan.release,
        action=plan.action,
        step=type(step).__name__,
        describe=step.describe(),
        restore=restore,
    )


def _kind(failure: DeploytoolError) -> type[DeploytoolError]:
    """What a failed plan raises: an interrupted one still exits 130 whatever followed."""
    return Interrupted if isinstance(failure, Interrupted) else DeployError


def _headline(plan: Plan, failure: DeploytoolError) -> str:
    return (
        failure.message
        if plan.action == "up"
        else f"rollback to release {plan.release} failed: {failure.message}"
        if plan.action == "rollback"
        else f"{plan.action} of slot {plan.slot} failed: {failure.message}"
    )


def _restore(run: Run, failure: DeploytoolError, hooks: Hooks) -> NoReturn:
    """Run the plan's restore steps; always raises, saying what serves on the slot now.
    The error keeps its kind (an interrupted up still exits 130 after the restore)."""
    plan, kind = run.plan, _kind(failure)
    headline = _headline(plan, failure)
    fallback = plan.fallback
    for step in plan.restore:
        try:
            _journal_step(plan, step, restore=True)
            APPLY[type(step)](run, step)
            if isinstance(step, (Stop, Start, WaitHealthy, CutOver)):
                _follow_monitor(run)
        except (Exception, KeyboardInterrupt) as exc:
            if isinstance(step, Stop):  # keep going: bringing the fallback back matters more
                run.reporter.warn(f"could not stop release {step.release}: {exc}")
                continue
            second = as_failure(exc, step)
            journal("restore.failed", slot=plan.slot, release=fallback, reason=second.message.splitlines()[0])
            container = run.engine.release(plan.slot, fallback) if fallback is not None else None
            raise kind(
                f"{headline}\n  AND restoring release {fallback} failed, so nothing serves on slot "
                f"{plan.slot}: {second.message}",
                hint=f"inspect with `deploytool status`; `docker start "
                f"{container.container_name if container else '...'}` retries the restore",
            ) from None
    if fallback is None:
        raise kind(
            f"{headline}\n  release {plan.release} is stopped; nothing served on slot {plan.slot} "
            "before it, so nothing serves now",
            hint=failure.hint,
        ) from None
    journal("restored", slot=plan.slot, release=fallback, after_failed=plan.release)
    url = run.outcome.serving.url if run.outcome.serving else "its port"
    hooks.after_restore(plan, fallback, run.outcome.serving.url if run.outcome.serving else None)
    raise kind(
        f"{headline}\n  release {plan.release} is stopped (kept for inspection); "
        f"release {fallback} was restored and is healthy at {url}",
        hint=failure.hint,
    ) from None
