"""What each step of a plan does when the executor applies it: the image built, the release's
files written, a release stopped (after its drain), the slot's cache prepared, a release
started, waited for, qualified, cut over to, pruned or removed, and a slot removed, each
through the engine and the state directory, each adding what it did to the run's `Outcome`.
executor.py decides the order, the journal and the restore; these functions only act.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
from .facts import port_facts
from .health import wait_until_healthy
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
class Run:
    """One application of a plan: what every step reads, and the outcome it adds to."""

    plan: Plan
    slot: Slot
    engine: Engine
    reporter: Reporter
    outcome: Outcome


def _build(run: Run, step: Build) -> None:
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


def _write_release(run: Run, step: WriteRelease) -> None:
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


def _stop(run: Run, step: Stop) -> None:
    release = run.engine.release(run.plan.slot, step.release)
    if release is None or (step.only_if_running and release.state not in ("running", "restarting")):
        return
    if step.drain_s is not None and step.url and release.running:
        _drain(run, step)
    run.reporter.step(f"stopping release {step.release} ({step.reason})")
    run.engine.stop(release)
    journal("release.stopped", slot=run.plan.slot, release=step.release, reason=step.reason)


def _drain(run: Run, step: Stop) -> None:
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


def _prepare_cache(run: Run, step: PrepareCache) -> None:
    decision = prepare_slot_cache(run.engine, step.image, run.slot, release=step.release)
    if step.release == run.plan.release and run.plan.action == "up":
        run.outcome.cache = decision
    run.reporter.step(f"JIT cache {decision.volume}: {decision.action} ({decision.reason})")


def _start(run: Run, step: Start) -> None:
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


def _wait_healthy(run: Run, step: WaitHealthy) -> None:
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


def _qualify(run: Run, step: Qualify) -> None:
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


def _cut_over(run: Run, step: CutOver) -> None:
    plan = run.plan
    write_pointers(
        plan.slot, SlotPointers(current=step.release, previous=step.previous, next_release=step.next_release)
    )
    if step.event == "rollback":
        journal("rollback", slot=plan.slot, release=step.release, stopped=step.previous)
    else:
        url = run.outcome.serving.url if run.outcome.serving else plan.url
        journal("cutover", slot=plan.slot, release=step.release, previous=step.previous, url=url)


def _prune(run: Run, step: Prune) -> None:
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


def _remove(run: Run, step: Remove) -> None:
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


def _remove_slot(run: Run, step: RemoveSlot) -> None:
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


APPLY: dict[type, Callable[[Run, Any], None]] = {
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
