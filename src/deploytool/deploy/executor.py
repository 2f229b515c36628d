"""One executor for every deploy plan: apply the steps in order through the engine, journal
each, report through one Reporter, and when a step fails (or Ctrl-C) after the hand-over
began, run the plan's restore steps and say what serves now.

The executor decides nothing a plan did not say, except what only the engine can tell when
the step runs (is the image there now, what does the cache volume hold now). A rollout
drives several slots' plans through it one after another; `Hooks` (hooks.py) are called at
every step boundary: `pre-stop` is `before_step` of a Stop, `post-cutover` and
`post-rollback` are `after_step` of a CutOver, `on-failure` is `on_failure`, and a restore
that brought the previous release back calls `after_restore` (a `post-rollback`).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from ..checks.targets import Target, qualify_results_path
from ..errors import DeployError, DeploytoolError, Interrupted
from ..files import write_atomic
from ..host.engine import Engine
from ..host.releases import Release
from ..host.slots import Slot
from ..image.build import BuildResult, build
from ..profiles import Profile
from ..release import inputs as release_inputs
from ..release import secrets
from ..release.cache import CacheDecision, prepare_slot_cache
from ..release.compose import document_text
from ..release.state import SlotPointers, journal, read_pointers, release_dir, release_path, write_pointers
from . import scrape_targets
from .facts import port_facts
from .health import wait_until_healthy
from .hooks import Hooks
from .reporter import Reporter
from .steps import (
    Build,
    CutOver,
    Plan,
    PrepareCache,
    Prune,
    Qualify,
    Remove,
    RemoveSlot,
    Start,
    Step,
    Stop,
    WaitHealthy,
    WriteRelease,
)


@dataclass
class Outcome:
    """What applying a plan did."""

    plan: Plan
    built: BuildResult | None = None
    cache: CacheDecision | None = None
    qualify: dict[str, Any] | None = None
    pruned: list[int] = field(default_factory=list)
    serving: Release | None = None  # the release that serves at the end
    seconds: float = 0.0
    drains: list[dict[str, Any]] = field(default_factory=list)  # each serving release's drain before its stop
    removed: list[str] = field(default_factory=list)  # what a `down` removed


@dataclass
class _Run:
    plan: Plan
    slot: Slot
    engine: Engine
    reporter: Reporter
    outcome: Outcome


def execute(
    plan: Plan, *, slot: Slot, engine: Engine, reporter: Reporter | None = None, hooks: Hooks | None = None
) -> Outcome:
    """Apply `plan` (the caller holds the slot's lock); what its steps need of the profile
    they carry. Raises a DeploytoolError saying what failed and what serves now; Ctrl-C raises
    Interrupted (exit 130) after the restore."""
    started = time.monotonic()
    reporter, hooks = reporter or Reporter(), hooks or Hooks()
    run = _Run(plan, slot, engine, reporter, Outcome(plan))
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


def _follow_monitor(run: _Run) -> None:
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


def _restore(run: _Run, failure: DeploytoolError, hooks: Hooks) -> NoReturn:
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


# -- the steps ---------------------------------------------------------------------------------
def _build(run: _Run, step: Build) -> None:
    if step.spec is None:
        raise DeployError(f"cannot build {step.image}: the plan was made without its profile")
    run.reporter.step(f"building the image for {step.profile} (a no-op when its inputs are unchanged)")
    result = build(
        step.spec, engine=run.engine, wheelhouse=Path(step.wheelhouse) if step.wheelhouse else None
    )
    if result.image != step.image:  # the inputs changed between planning and now
        raise DeployError(
            f"the image built ({result.image}) is not the one planned ({step.image})",
            hint="a profile or recipe file changed during the up; run it again",
        )
    run.outcome.built = result
    run.reporter.step(result.message)


def _write_release(run: _Run, step: WriteRelease) -> None:
    """The release number is used from here on, even if the up fails later."""
    plan = run.plan
    directory = release_dir(plan.slot, step.release)
    assert plan.compose is not None and plan.record is not None and plan.profile is not None
    write_atomic(
        directory / "compose.yaml",
        document_text(
            plan.compose, profile=plan.profile, slot=plan.slot, release=step.release, notes=plan.inputs
        ),
    )
    # release.json says where the release's secrets live: its owner's alone, like the secrets
    write_atomic(
        directory / "release.json",
        _json(plan.record),
        private=bool(plan.record.get("api_key") or plan.record.get("secrets")),
    )
    pointers = read_pointers(plan.slot)
    pointers.next_release = step.release + 1
    write_pointers(plan.slot, pointers)


def _stop(run: _Run, step: Stop) -> None:
    release = run.engine.release(run.plan.slot, step.release)
    if release is None or (step.only_if_running and release.state not in ("running", "restarting")):
        return
    if step.drain_s is not None and step.url and release.running:
        _drain(run, step)
    run.reporter.step(f"stopping release {step.release} ({step.reason})")
    run.engine.stop(release)
    journal("release.stopped", slot=run.plan.slot, release=step.release, reason=step.reason)


def _drain(run: _Run, step: Stop) -> None:
    """After the pre-stop hook took the release out of the gateway: wait for what it still runs,
    by the server's own count, at most the drain timeout; what is left is said, then cut."""
    from .drain import drain

    assert step.url is not None and step.drain_s is not None
    try:
        key = release_inputs.release_api_key(run.plan.slot, step.release)
    except DeploytoolError:
        key = None  # /metrics then answers 401, and the drain says it could not count
    run.reporter.step(f"draining release {step.release} (at most {step.drain_s:g} s)")
    result = drain(step.url, step.release, step.drain_s, api_key=key)
    journal("release.drained", slot=run.plan.slot, **result.to_json())
    run.outcome.drains.append(result.to_json())
    (run.reporter.step if result.drained else run.reporter.warn)(result.describe())


def _prepare_cache(run: _Run, step: PrepareCache) -> None:
    decision = prepare_slot_cache(run.engine, step.image, run.slot, release=step.release)
    if step.release == run.plan.release and run.plan.action == "up":
        run.outcome.cache = decision
    run.reporter.step(f"JIT cache {decision.volume}: {decision.action} ({decision.reason})")


def _start(run: _Run, step: Start) -> None:
    engine, slot = run.engine, run.plan.slot
    if step.new:
        assert step.bind is not None and step.port is not None
        found = port_facts(engine, step.bind, step.port)
        if not found.free:  # taken between planning and now (the stopped release freed its own)
            raise DeployError(
                f"port {found.port} on {found.bind} is already in use by {found.holder or found.error}",
                hint="free it, or publish this slot on another port with --port",
            )
        run.reporter.step(f"starting release {step.release} ({step.project})")
        compose_file = release_dir(slot, step.release) / "compose.yaml"
        engine.compose(
            step.project,
            compose_file,
            "up",
            "--detach",
            "--no-build",
            "--pull",
            "never",
            secret_env=_secret_env(step),
        )
        journal("release.started", slot=slot, release=step.release)
        if engine.release(slot, step.release) is None:
            raise DeployError(f"release {step.release} was started but its container is not on the engine")
        return
    release = engine.release(slot, step.release)
    if release is None:
        raise DeployError(f"release {step.release} is no longer on the engine")
    run.reporter.step(f"starting release {step.release}")
    engine.start(release)


def _secret_env(step: Start) -> dict[str, str] | None:
    """The secrets' values, read from the host now (planning checked they were
    readable and kept none); they go to `docker compose up`'s environment only."""
    if not step.secrets:
        return None
    if not step.sources:
        raise DeployError(
            f"cannot start release {step.release}: its plan does not say where its secrets are read"
        )
    return secrets.resolve_values([s for s in step.sources if s.name in step.secrets])


def _wait_healthy(run: _Run, step: WaitHealthy) -> None:
    release = run.engine.release(run.plan.slot, step.release)
    if release is None:
        raise DeployError(f"release {step.release} is no longer on the engine")
    # each release's own key (read from where its release.json says), for a health
    # path SGLang does not serve without one; a restored release may have another key
    headers = release_inputs.health_headers(run.plan.slot, step.release, step.path)
    run.outcome.serving = wait_until_healthy(
        run.engine,
        release,
        budget=step.budget_s,
        path=step.path,
        reporter=run.reporter,
        headers=headers,
        rule=step.rule,
    )


def _qualify(run: _Run, step: Qualify) -> None:
    from ..qualify import run_qualification  # the suites are only needed once a release is up

    engine, plan, release, profile = run.engine, run.plan, run.outcome.serving, step.spec
    assert release is not None and profile is not None
    previous = engine.release(plan.slot, plan.fallback) if plan.fallback is not None else None
    run.reporter.step(f"qualifying release {step.release}")
    target = Target(
        url=release.url,
        profile=profile,
        slot=run.slot,
        release=release,
        image_labels=engine.image_labels(release.image),
        previous=previous,
        previous_results=qualify_results_path(run.slot, previous.release) if previous else None,
        baseline=(
            f"release {previous.release} (it served before release {step.release} is cut over)"
            if previous
            else f"none (release {step.release} is the slot's first)"
        ),
        api_key=_api_key(profile),
        model=plan.model,
    )  # the key callers send, and the weights it serves
    report = run_qualification(
        target,
        suites=step.suites,
        limit=step.limit,
        report_dir=Path(step.report_dir),
        overrides=step.overrides,
    )
    summary = {
        "passed": report.passed,
        "summary": report.summary_line(),
        "report_dir": str(report.report_dir),
    }
    journal("qualify", slot=plan.slot, release=step.release, **summary)
    run.outcome.qualify = summary
    if report.interrupted:
        raise Interrupted(
            f"interrupted (Ctrl-C) while qualifying release {step.release}; partial report: "
            f"{report.report_dir / 'report.md'}"
        )
    if not report.passed:
        raise DeployError(
            f"release {step.release} failed qualification: {report.summary_line()}\n"
            f"  report: {report.report_dir / 'report.md'}"
        )
    run.reporter.step(f"qualified: {report.summary_line()}")


def _api_key(profile: Profile) -> str | None:
    key = profile.server.api_key
    return key.resolve(what=f"server.api_key of profile {profile.name}") if key else None


def _cut_over(run: _Run, step: CutOver) -> None:
    plan = run.plan
    write_pointers(
        plan.slot, SlotPointers(current=step.release, previous=step.previous, next_release=step.next_release)
    )
    if step.event == "rollback":
        journal("rollback", slot=plan.slot, release=step.release, stopped=step.previous)
    else:
        url = run.outcome.serving.url if run.outcome.serving else plan.url
        journal("cutover", slot=plan.slot, release=step.release, previous=step.previous, url=url)


def _prune(run: _Run, step: Prune) -> None:
    """Removes the planned releases that are still stopped; their files and reports stay.
    After a cut-over a failed clean-up is only worth a warning."""
    engine, slot = run.engine, run.plan.slot
    try:
        for number in step.releases:
            release = engine.release(slot, number)
            if release is not None and release.running:
                continue  # never remove what serves, whatever the plan said
            compose_file = release_dir(slot, number) / "compose.yaml"
            if compose_file.exists():
                engine.compose(
                    run.slot.project(number), compose_file, "down", "--remove-orphans", check=False
                )
            left = engine.release(slot, number)  # read again: `down` may have removed it
            if left is not None:
                engine.remove(left)
            journal("release.pruned", slot=slot, release=number)
            run.outcome.pruned.append(number)
    except Exception as exc:
        if run.plan.action == "prune":
            raise
        run.reporter.warn(f"pruning old releases failed: {exc}")


def _remove(run: _Run, step: Remove) -> None:
    """A release of a slot taken down: its compose project (container and network) and, should
    compose not know it any more, its container by label."""
    engine, slot = run.engine, run.plan.slot
    compose_file = release_path(slot, step.release) / "compose.yaml"
    if compose_file.exists():
        engine.compose(step.project, compose_file, "down", "--remove-orphans", check=False)
    release = engine.release(slot, step.release)
    if release is not None:
        engine.remove(release)
    journal("release.removed", slot=slot, release=step.release)
    run.outcome.removed.append(f"release {step.release} ({step.container})")
    run.reporter.step(f"removed release {step.release}")


def _remove_slot(run: _Run, step: RemoveSlot) -> None:
    engine, slot = run.engine, run.plan.slot
    for name in engine.remove_networks(slot):
        run.outcome.removed.append(f"network {name}")
    if step.volume and engine.volume_exists(step.volume):
        engine.remove_volume(step.volume)
        run.outcome.removed.append(f"volume {step.volume}")
    if step.state:
        journal("slot.removed", slot=slot, state=step.state, volume=step.volume)
        shutil.rmtree(step.state, ignore_errors=True)
        run.outcome.removed.append(f"state {step.state}")
    else:
        write_pointers(
            slot, SlotPointers(current=None, previous=None, next_release=read_pointers(slot).next_release)
        )
        journal("slot.removed", slot=slot, state=None, volume=step.volume)


def _json(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2) + "\n"


APPLY: dict[type, Callable[[_Run, Any], None]] = {
    Build: _build,
    WriteRelease: _write_release,
    Stop: _stop,
    PrepareCache: _prepare_cache,
    Start: _start,
    WaitHealthy: _wait_healthy,
    Qualify: _qualify,
    CutOver: _cut_over,
    Prune: _prune,
    Remove: _remove,
    RemoveSlot: _remove_slot,
}
