"""`up`, `rollback` and `status`: a deploy reads as a story.

A slot serves from one container at a time (a card holds one copy of the model), so `up` is:

  1. plan: resolve the profile, build (a no-op when the inputs are unchanged), number the
     release, render its compose file and have `docker compose config` validate it;
  2. hand over: stop the serving release (stopped, never removed), prepare the JIT cache,
     start the new release as its own compose project;
  3. prove: wait until healthy within the profile's health budget, then qualify;
  4. cut over: record the new release as current and the old one as the rollback target;
     prune stopped releases beyond the retention count, never the rollback target.

Any failure in 2-3 stops the new release (kept for inspection), starts the previous one
again, verifies it healthy, and raises a DeployError that says what happened.
"""

from __future__ import annotations

import errno
import json
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import httpx

from .cache import CacheDecision, prepare_slot_cache
from .compose import RenderRequest, write_compose
from .engine import Engine, Release
from .errors import DeployError, DeploytoolError, UsageError
from .gpus import classify, read_inventory
from .images import build
from .profiles import HealthSpec, Profile, ProfileStore
from . import release_inputs  # issue 13: weights and secrets, checked before anything is stopped
from .slots import Slot
from .report import write_atomic
from .state import SlotPointers, journal, read_journal, read_pointers, release_dir, slot_lock, write_pointers
from .targets import Target, qualify_results_path

DEFAULT_RETENTION = 3


class Reporter:
    """How deploy tells a person what it is doing; the CLI's version draws progress bars.
    The default is silent, for library callers and tests."""

    def step(self, message: str) -> None:  # a milestone: "stopping release 1"
        pass

    def waiting(self, label: str, elapsed: float, budget: float) -> None:  # a long wait
        pass

    def warn(self, message: str) -> None:
        pass


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
    model: dict[str, Any] | None = None  # issue 13: the weights it serves (models.ModelPlan.record)


@dataclass
class RollbackResult:
    slot: str
    release: int  # now serving
    stopped: int  # the release rolled back from
    url: str
    seconds: float


class HealthFailure(DeployError):
    pass


# -- up ----------------------------------------------------------------------------------------
def up(slot: Slot, *, profile_name: str | None = None, host_port: int | None = None, bind: str = "127.0.0.1",
       skip_qualify: bool = False, qualify_suites: list[str] | None = None, qualify_limit: int | None = None,
       retention: int = DEFAULT_RETENTION, profiles_dirs: list[Path] | None = None,
       reporter: Reporter | None = None, engine: Engine | None = None) -> UpResult:
    reporter = reporter or Reporter()
    started = time.monotonic()
    engine = engine or Engine()
    engine.compose_version()  # fail early, before building, when the plugin is missing
    with slot_lock(slot.name, "up"):
        releases = engine.releases(slot.name)
        pointers = read_pointers(slot.name)
        serving = _serving(releases)
        # What to bring back if this up fails: the serving release, else the last one cut over.
        fallback = serving or next((r for r in releases if r.release == pointers.current), None)
        profile = _choose_profile(slot, profile_name, fallback, profiles_dirs)
        _check_cards(slot, profile, reporter)
        # issue 13: the weights are there and the secrets readable, before anything is built or stopped.
        inputs = release_inputs.prepare(profile, bind=bind)
        for warning in inputs.warnings:
            reporter.warn(warning)

        reporter.step(f"building the image for {profile.name} (a no-op when its inputs are unchanged)")
        image = build(profile, engine=engine)
        reporter.step(image.message)

        number = max([pointers.next_release] + [r.release + 1 for r in releases])
        directory = release_dir(slot.name, number)
        request = RenderRequest(profile=profile, slot=slot, release=number, image=image.image,
                                host_port=host_port, bind=bind, model=inputs.model, secrets=inputs.secrets)
        compose_file = write_compose(request, directory / "compose.yaml")
        engine.compose_config(compose_file)
        write_release_record(slot.name, number, profile, image.image, extra=inputs.record(profile, bind))
        pointers.next_release = number + 1
        write_pointers(slot.name, pointers)
        if serving is None or request.port != serving.host_port:
            _require_free_port(bind, request.port, engine)  # before anything is stopped
        journal("up.start", slot=slot.name, release=number, profile=profile.name, image=image.image,
                previous=fallback.release if fallback else None, skip_qualify=skip_qualify,
                model=inputs.model.identity())
        if skip_qualify:
            reporter.warn("--skip-qualify: this release takes traffic without acceptance suites")
            journal("qualify.skipped", slot=slot.name, release=number, reason="--skip-qualify")

        try:
            if serving:
                reporter.step(f"stopping release {serving.release} (kept for rollback)")
                engine.stop(serving)
                journal("release.stopped", slot=slot.name, release=serving.release,
                        reason=f"handing over to {number}")
            _require_free_port(bind, request.port, engine)
            cache = prepare_slot_cache(engine, image.image, slot, release=number)
            reporter.step(f"JIT cache {cache.volume}: {cache.action} ({cache.reason})")
            new = _start(engine, slot, number, compose_file, reporter, secret_env=inputs.secret_env)
            _wait_until_healthy(engine, new, profile.health, reporter)
            qualify = None
            if not skip_qualify:
                qualify = _qualify(engine, new, profile, slot, fallback, directory, qualify_suites,
                                   qualify_limit, reporter, inputs=inputs)
        except (Exception, KeyboardInterrupt) as exc:
            # Whatever stopped the hand-over (a failed gate, Ctrl-C, a bad qualify setting, an
            # engine error), the previous release must serve again before we give up.
            _recover(engine, slot, number, fallback, reporter, _as_failure(exc))
            raise  # _recover always raises a fuller error; this line is never reached

        previous = fallback.release if fallback else pointers.previous
        write_pointers(slot.name, SlotPointers(current=number, previous=previous, next_release=number + 1))
        journal("cutover", slot=slot.name, release=number, previous=previous, url=new.url)
        try:
            pruned = prune(engine, slot, retention=retention)
        except Exception as exc:  # the cut-over stands; a failed clean-up is only worth a warning
            reporter.warn(f"pruning old releases failed: {exc}")
            pruned = []
    return UpResult(slot=slot.name, release=number, profile=profile.name, image=image.image, url=new.url,
                    previous=previous, built=image.built, cache=cache, qualify=qualify,
                    qualify_skipped=skip_qualify, pruned=pruned, seconds=round(time.monotonic() - started, 1),
                    model=inputs.model.record())


def write_release_record(slot: str, number: int, profile: Profile, image: str,
                         extra: dict[str, Any] | None = None) -> None:
    """What a restore needs without the profile search path: a rollback run from another
    folder, or after a profile was renamed, still knows how long this release may take.
    `extra` (issue 13): the weights it serves and where its secrets come from (never values)."""
    record = {"profile": profile.name, "image": image, "health": profile.health.model_dump(mode="json"),
              **(extra or {})}
    write_atomic(release_dir(slot, number) / "release.json", json.dumps(record, indent=2) + "\n")


def release_health(slot: str, number: int) -> HealthSpec:
    path = release_dir(slot, number) / "release.json"
    try:
        return HealthSpec.model_validate(json.loads(path.read_text())["health"])
    except (OSError, ValueError, KeyError):
        return HealthSpec()  # SGLang's generous defaults: a slow start is better than a false failure


def _as_failure(exc: BaseException) -> DeployError:
    if isinstance(exc, DeployError):
        return exc
    if isinstance(exc, KeyboardInterrupt):
        return DeployError("interrupted (Ctrl-C)")
    if isinstance(exc, DeploytoolError):
        return DeployError(exc.message, hint=exc.hint)
    return DeployError(f"unexpected {type(exc).__name__}: {exc}")


def _serving(releases: list[Release]) -> Release | None:
    running = [r for r in releases if r.running or r.state == "restarting"]
    return max(running, key=lambda r: r.release) if running else None


def _choose_profile(slot: Slot, name: str | None, serving: Release | None,
                    profiles_dirs: list[Path] | None) -> Profile:
    store = ProfileStore(profiles_dirs)
    if name is None:
        if serving is None:
            raise UsageError(f"slot {slot.name} has no release yet: say which profile with --profile NAME",
                             hint="`deploytool profiles list` shows them")
        name = serving.profile
    profile = store.get(name)
    if profile.abstract:
        raise UsageError(f"profile {name!r} is abstract (a base for others to extend); deploy one that extends it")
    if slot.is_cpu and not profile.is_simulator:
        raise UsageError(f"profile {name!r} runs SGLang on GPUs; the CPU slot takes the reference runtime only",
                         hint="use --gpu UUID for this profile, or --profile sim for the CPU slot")
    return profile


def _check_cards(slot: Slot, profile: Profile, reporter: Reporter) -> None:
    if slot.is_cpu:
        return
    inventory = read_inventory()
    if inventory.error:
        reporter.warn(f"cannot check the slot's cards: {inventory.error}")
        return
    cards = []
    for uuid in slot.gpus:
        card = inventory.by_uuid(uuid)
        if card is None and uuid.startswith("MIG-"):
            reporter.warn(f"{uuid} is a MIG instance: its parent card is not checked against the profile")
            continue
        if card is None:
            known = ", ".join(g.uuid for g in inventory.gpus) or "none"
            raise UsageError(f"--gpu {uuid}: no such GPU on this machine", hint=f"this machine's GPUs: {known}")
        cards.append(card)
    if not cards:
        return
    fit = classify(profile, cards)
    if fit.verdict == "incompatible":
        raise UsageError(f"profile {profile.name} cannot run on slot {slot.name}: {'; '.join(fit.reasons)}")
    if fit.verdict != "runnable":
        reporter.warn(f"profile {profile.name} on slot {slot.name}: {'; '.join(fit.reasons)}")


def _require_free_port(bind: str, port: int, engine: Engine) -> None:
    """A published port that another process holds would fail the start after the previous
    release is already stopped; find out first, with the bind the engine would do."""
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((bind, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise DeployError(f"cannot publish on {bind}:{port}: {exc.strerror}") from None
            holder = next((r for r in engine.releases() if r.running and r.host_port == port), None)
            who = (f"release {holder.release} of slot {holder.slot} ({holder.container_name})" if holder
                   else "another process")
            raise DeployError(f"port {port} on {bind} is already in use by {who}",
                              hint="free it, or publish this slot on another port with --port") from None


def _start(engine: Engine, slot: Slot, number: int, compose_file: Path, reporter: Reporter,
           secret_env: dict[str, str] | None = None) -> Release:
    reporter.step(f"starting release {number} ({slot.project(number)})")
    engine.compose(slot.project(number), compose_file, "up", "--detach", "--no-build", "--pull", "never",
                   secret_env=secret_env)
    journal("release.started", slot=slot.name, release=number)
    release = engine.release(slot.name, number)
    if release is None:
        raise DeployError(f"release {number} was started but its container is not on the engine")
    return release


def _wait_until_healthy(engine: Engine, release: Release, health: HealthSpec, reporter: Reporter) -> Release:
    """Healthy means: the engine's health check passed AND the published port answers the
    health path from the host. A crash or a restart loop fails at once, not at the budget.
    (The engine resets RestartCount when deploytool starts a container, so a restored release
    is not mistaken for a crashing one.)"""
    budget = health.budget_seconds()
    started = time.monotonic()
    headers = release_inputs.health_headers(release.slot, release.release, health.path)  # issue 13
    while True:
        elapsed = time.monotonic() - started
        release = engine.refresh(release)
        if release.state in ("exited", "dead", "restarting") or release.restart_count > 0:
            code = engine.exit_code(release)
            raise HealthFailure(f"release {release.release} crashed while starting (state {release.state}, "
                                f"exit code {code}); last lines of its log:\n{_indent(engine.logs_tail(release))}")
        if release.health == "healthy" and _answers(release.url + health.path, headers):
            journal("release.healthy", slot=release.slot, release=release.release, seconds=round(elapsed, 1))
            return release
        if release.health == "unhealthy":
            raise HealthFailure(f"release {release.release} failed its health check; last lines of its log:\n"
                                f"{_indent(engine.logs_tail(release))}")
        if elapsed > budget:
            raise HealthFailure(f"release {release.release} did not become healthy within its health budget "
                                f"of {budget} s (profile health: start_period + retries x (interval + timeout)); "
                                f"last lines of its log:\n{_indent(engine.logs_tail(release))}")
        reporter.waiting(f"waiting for release {release.release} to be healthy", elapsed, budget)
        time.sleep(0.5)


def _answers(url: str, headers: dict[str, str] | None = None) -> bool:
    try:
        return httpx.get(url, timeout=5, headers=headers).status_code == 200
    except httpx.HTTPError:
        return False


def _qualify(engine: Engine, release: Release, profile: Profile, slot: Slot, previous: Release | None,
             directory: Path, suites: list[str] | None, limit: int | None, reporter: Reporter,
             inputs: "release_inputs.ReleaseInputs | None" = None) -> dict[str, Any]:
    from .qualify import run_qualification  # the suites are only needed once a release is up

    reporter.step(f"qualifying release {release.release}")
    target = Target(url=release.url, profile=profile, slot=slot, release=release,
                    image_labels=engine.image_labels(release.image), previous=previous,
                    previous_results=qualify_results_path(slot, previous.release) if previous else None,
                    api_key=inputs.api_key if inputs else None,
                    model=inputs.model.record() if inputs else None)
    report = run_qualification(target, suites=suites, limit=limit, report_dir=directory / "qualify",
                               progress=False)
    summary = {"passed": report.passed, "summary": report.summary_line(), "report_dir": str(report.report_dir)}
    journal("qualify", slot=slot.name, release=release.release, **summary)
    if not report.passed:
        raise DeployError(f"release {release.release} failed qualification: {report.summary_line()}\n"
                          f"  report: {report.report_dir / 'report.md'}")
    reporter.step(f"qualified: {report.summary_line()}")
    return summary


def _bring_back(engine: Engine, slot: Slot, release: Release, reporter: Reporter) -> Release:
    """Start a stopped release again and verify it healthy. Its kernels must match the cache,
    which the failed or current release may have stamped with another toolchain."""
    prepare_slot_cache(engine, release.image, slot, release=release.release)
    engine.start(release)
    return _wait_until_healthy(engine, release, release_health(slot.name, release.release), reporter)


def _recover(engine: Engine, slot: Slot, number: int, previous: Release | None, reporter: Reporter,
             failure: DeployError) -> NoReturn:
    """The new release failed: keep it stopped for inspection and bring the previous one back."""
    journal("up.failed", slot=slot.name, release=number, reason=failure.message.splitlines()[0])
    _restore_after_failure(engine, slot, number, previous, reporter, failure.message, failure.hint)


def _restore_after_failure(engine: Engine, slot: Slot, failed: int, fallback: Release | None,
                           reporter: Reporter, headline: str, hint: str | None) -> NoReturn:
    """Stop the release that failed (kept for inspection), start `fallback` again and verify it
    healthy. Always raises, with a message that says what serves on the slot now."""
    try:
        release = engine.release(slot.name, failed)
        if release is not None and release.state in ("running", "restarting"):
            engine.stop(release)
            journal("release.stopped", slot=slot.name, release=failed, reason="failed, kept for inspection")
    except Exception as exc:  # keep going: bringing the fallback back matters more
        reporter.warn(f"could not stop release {failed}: {exc}")
    if fallback is None:
        raise DeployError(f"{headline}\n  release {failed} is stopped; nothing served on slot {slot.name} "
                          "before it, so nothing serves now", hint=hint) from None
    reporter.step(f"restoring release {fallback.release}")
    try:
        restored = _bring_back(engine, slot, fallback, reporter)
    except (Exception, KeyboardInterrupt) as exc:
        second = _as_failure(exc)
        journal("restore.failed", slot=slot.name, release=fallback.release, reason=second.message.splitlines()[0])
        raise DeployError(f"{headline}\n  AND restoring release {fallback.release} failed, so nothing "
                          f"serves on slot {slot.name}: {second.message}",
                          hint=f"inspect with `deploytool status`; `docker start {fallback.container_name}` "
                               "retries the restore") from None
    journal("restored", slot=slot.name, release=fallback.release, after_failed=failed)
    raise DeployError(f"{headline}\n  release {failed} is stopped (kept for inspection); "
                      f"release {fallback.release} was restored and is healthy at {restored.url}", hint=hint) from None


# -- rollback ----------------------------------------------------------------------------------
def rollback(slot: Slot, *, reporter: Reporter | None = None, engine: Engine | None = None) -> RollbackResult:
    """Stop the current release, start the rollback target and verify it healthy (a card holds
    one copy of the model, so the two cannot run side by side); if the target fails, the
    current release is started again."""
    reporter = reporter or Reporter()
    engine = engine or Engine()
    started = time.monotonic()
    with slot_lock(slot.name, "rollback"):
        releases = {r.release: r for r in engine.releases(slot.name)}
        pointers = read_pointers(slot.name)
        current = _serving(list(releases.values()))
        target_number = pointers.previous
        if target_number is None or target_number not in releases:
            why = "it has no previous release" if target_number is None else \
                f"its previous release {target_number} no longer exists on the engine"
            raise DeployError(f"cannot roll back slot {slot.name}: {why}")
        if current is not None and current.release == target_number:
            raise DeployError(f"release {target_number} is already serving on slot {slot.name}")
        target = releases[target_number]
        journal("rollback.start", slot=slot.name, release=target_number,
                current=current.release if current else None)
        try:
            if current is not None:
                reporter.step(f"stopping release {current.release}")
                engine.stop(current)
            reporter.step(f"starting release {target_number}")
            target = _bring_back(engine, slot, target, reporter)
        except (Exception, KeyboardInterrupt) as exc:
            failure = _as_failure(exc)
            journal("rollback.failed", slot=slot.name, release=target_number, reason=failure.message.splitlines()[0])
            _restore_after_failure(engine, slot, target_number, current, reporter,
                                   f"rollback to release {target_number} failed: {failure.message}", failure.hint)
        stopped = current.release if current else pointers.current or target_number
        write_pointers(slot.name, SlotPointers(current=target_number, previous=stopped,
                                               next_release=pointers.next_release))
        journal("rollback", slot=slot.name, release=target_number, stopped=stopped,
                seconds=round(time.monotonic() - started, 2))
    return RollbackResult(slot=slot.name, release=target_number, stopped=stopped, url=target.url,
                          seconds=round(time.monotonic() - started, 2))


# -- prune -------------------------------------------------------------------------------------
def prune(engine: Engine, slot: Slot, *, retention: int = DEFAULT_RETENTION) -> list[int]:
    """Remove stopped releases beyond `retention`, oldest first; never the current release or
    the rollback target. Their rendered files and reports stay in the state directory."""
    pointers = read_pointers(slot.name)
    protected = {pointers.current, pointers.previous}
    stopped = [r for r in engine.releases(slot.name) if not r.running and r.release not in protected]
    keep = max(retention - (1 if pointers.previous is not None else 0), 0)
    doomed = sorted(stopped, key=lambda r: r.release, reverse=True)[keep:]
    for release in doomed:
        compose_file = release_dir(slot.name, release.release) / "compose.yaml"
        if compose_file.exists():
            engine.compose(slot.project(release.release), compose_file, "down", "--remove-orphans", check=False)
        if engine.release(slot.name, release.release) is not None:
            engine.remove(release)
        journal("release.pruned", slot=slot.name, release=release.release)
    return sorted(r.release for r in doomed)


# -- status ------------------------------------------------------------------------------------
@dataclass
class SlotStatus:
    slot: str
    current: int | None
    previous: int | None
    serving_url: str | None
    releases: list[dict[str, Any]]
    last_events: list[dict[str, Any]]


def status(engine: Engine | None = None, *, events: int = 5) -> list[SlotStatus]:
    engine = engine or Engine()
    by_slot: dict[str, list[Release]] = {}
    for release in engine.releases():
        by_slot.setdefault(release.slot, []).append(release)
    result = []
    for name, releases in sorted(by_slot.items()):
        pointers = read_pointers(name)
        serving = _serving(releases)
        rows = []
        for r in sorted(releases, key=lambda r: r.release, reverse=True):
            role = "current" if serving and r.release == serving.release else \
                "rollback target" if r.release == pointers.previous else ""
            # A stopped container keeps its last health status; it says nothing about now.
            health = r.health if r.running else None
            rows.append({"release": r.release, "role": role, "state": r.state, "health": health,
                         "profile": r.profile, "image": r.image, "url": r.url, "gpus": r.gpus,
                         "simulator": r.simulator, "container": r.container_name, "created": r.created,
                         # issue 13: which weights, and whether callers need a key
                         "model": r.model or None, "api_key": "required" if r.api_key else "none",
                         "host_ip": r.host_ip})
        result.append(SlotStatus(slot=name, current=serving.release if serving else None,
                                 previous=pointers.previous, serving_url=serving.url if serving else None,
                                 releases=rows, last_events=read_journal(name, limit=events)))
    return result


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines()[-30:])
