"""`deploytool watch`: the supervisor. Probes each slot's serving release with the compose
health check's probe (its path, its timeout, success as `curl -f` has it: a status below
400), and applies watch_policy's decision: restart the container, or roll a crash-looping
release back to the slot's stopped previous one (the `on-failure` hook says so; the rollback
itself runs the `pre-stop` and `post-rollback` hooks like `deploytool rollback`).

Watch never touches a slot while an up, a rollback or a rollout holds its lock (an up stops
the serving release on purpose), nor a release someone stopped (`docker stop`): only running
or restarting containers are probed. Journaled: watch.start, watch.restart, watch.capped,
watch.crash_loop, watch.rolled_back, watch.rollback_failed, watch.stop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from ..errors import DeploytoolError, SlotBusy
from ..host.engine import Engine
from ..host.releases import Release
from ..host.slots import slot_named
from ..profiles import HealthSpec, WatchSpec
from ..release import inputs as release_inputs
from ..release.state import journal, read_journal, read_pointers, slot_lock
from ..server.readiness import health_check
from .executor import execute
from .facts import gather_slot
from .hooks import Hooks
from .plan import plan_rollback
from .reporter import Reporter
from .watch_policy import Decision, Observation, SlotWatch, decide


@dataclass
class WatchOptions:
    slots: list[str] | None = None  # slot names; None: every slot with a release
    once: bool = False  # one round of probes, then return
    max_seconds: float | None = None  # stop after this long (tests, cron)
    interval: float | None = None  # seconds between rounds; default: the smallest watch.interval


@dataclass
class WatchResult:
    rounds: int = 0
    seconds: float = 0.0
    actions: list[dict] = field(default_factory=list)  # every restart, cap and rollback, as journaled


def release_watch(slot: str, number: int) -> WatchSpec:
    """A release's watch settings from its record (written by `up`), else the defaults."""
    try:
        return WatchSpec.model_validate(release_inputs.read_record(slot, number)["watch"])
    except (ValueError, KeyError):
        return WatchSpec()


def probe(release: Release, health: HealthSpec, headers: dict[str, str] | None = None) -> bool:
    """The compose health check's probe, from the host: GET the health path, a status below
    400 within the health timeout (what `curl -fsS` accepts). `headers`: the release's own
    Authorization where its health path is not one SGLang serves without a key. The timeout is
    the whole probe's, connect to last byte: a server that trickles its answer is unhealthy."""
    if release.state != "running":
        return False
    status = health_check(release.url, health.path, timeout=health.timeout, headers=headers).status
    return status is not None and status < 400


def since_cutover(slot: str, number: int, now_wall: float) -> float | None:
    """Seconds since `number` was cut over by an up (the journal's `cutover`); None when it
    came back by a rollback since: rolling back from a release that was itself the rollback
    target would swap the two back and forth, so such a release is only ever restarted."""
    for entry in reversed(read_journal(slot)):
        if entry["event"] in ("cutover", "rollback") and entry.get("release") == number:
            if entry["event"] == "rollback":
                return None
            return max(0.0, now_wall - datetime.fromisoformat(entry["time"]).timestamp())
    return None


def _slot_is_free(slot: str) -> bool:
    try:
        with slot_lock(slot, "watch probe"):
            return True
    except SlotBusy:
        return False


class Supervisor:
    def __init__(
        self, *, engine: Engine, reporter: Reporter, hooks: Hooks, clock: Callable[[], float] = time.monotonic
    ):
        self.engine, self.reporter, self.hooks, self.clock = engine, reporter, hooks, clock
        self.states: dict[str, SlotWatch] = {}
        self.actions: list[dict] = []

    def round(self, slots: list[str] | None) -> float:
        """Probe every watched slot once; returns the interval the slots ask for."""
        names = slots or sorted({r.slot for r in self.engine.releases()})
        interval = None
        for name in names:
            spec = self.check(name)
            if spec is not None:
                interval = spec.interval if interval is None else min(interval, spec.interval)
        return interval if interval is not None else WatchSpec().interval

    def check(self, slot: str) -> WatchSpec | None:
        current = read_pointers(slot).current
        release = self.engine.release(slot, current) if current is not None else None
        if release is None or release.state not in ("running", "restarting") or not _slot_is_free(slot):
            self.states.pop(slot, None)  # stopped on purpose, or an up/rollback is at work
            return None
        policy, health = (
            release_watch(slot, release.release),
            release_inputs.release_health(slot, release.release),
        )
        previous = read_pointers(slot).previous
        headers = release_inputs.health_headers(
            slot, release.release, health.path
        )  # each release its own key
        seen = Observation(
            release=release.release,
            healthy=probe(release, health, headers),
            engine_restarts=release.restart_count,
            since_cutover=since_cutover(slot, release.release, time.time()),
            can_roll_back=previous is not None and self.engine.release(slot, previous) is not None,
        )
        state = self.states.setdefault(slot, SlotWatch())
        decision = decide(state, seen, policy, self.clock())
        self.apply(slot, release, decision, state)
        return policy

    def apply(self, slot: str, release: Release, decision: Decision, state: SlotWatch) -> None:
        if decision.action == "ok":
            return
        if decision.action == "wait":
            self.reporter.step(f"slot {slot}: release {release.release}: {decision.reason}")
            return
        if decision.action == "capped":
            if not state.capped_logged:
                state.capped_logged = True
                self._record("watch.capped", slot, release.release, reason=decision.reason)
                self.reporter.warn(
                    f"slot {slot}: release {release.release} stays unhealthy: {decision.reason}"
                )
                self.hooks.event(
                    "on-failure",
                    slot=slot,
                    release=release.release,
                    url=release.url,
                    profile=release.profile,
                    action="watch-capped",
                    error=f"unhealthy and not restarted again: {decision.reason}",
                )
            return
        if decision.action == "restart":
            self._restart(slot, release, decision, state)
            return
        self._roll_back(slot, release, decision)

    def _restart(self, slot: str, release: Release, decision: Decision, state: SlotWatch) -> None:
        self.reporter.step(f"slot {slot}: restarting release {release.release} ({decision.reason})")
        try:
            with slot_lock(slot, "watch restart"):
                self.engine.stop(release, timeout=10)
                self.engine.start(release)
        except SlotBusy:
            return
        except DeploytoolError as exc:
            self.reporter.warn(f"slot {slot}: restarting release {release.release} failed: {exc.message}")
        self._record(
            "watch.restart",
            slot,
            release.release,
            reason=decision.reason,
            restarts_this_hour=len([t for t in state.restarts if self.clock() - t < 3600]),
            next_backoff_s=state.backoff,
        )

    def _roll_back(self, slot: str, release: Release, decision: Decision) -> None:
        self.reporter.warn(
            f"slot {slot}: release {release.release} is crash-looping ({decision.reason}): "
            "rolling back to the previous release"
        )
        self._record("watch.crash_loop", slot, release.release, reason=decision.reason)
        facts_slot = slot_named(slot, release.gpus)
        try:
            with slot_lock(slot, "watch rollback"):
                plan = plan_rollback(gather_slot(self.engine, facts_slot))
                self.hooks.event(
                    "on-failure",
                    slot=slot,
                    release=release.release,
                    url=release.url,
                    profile=release.profile,
                    action="watch-rollback",
                    next_release=plan.release,
                    error=f"crash loop after cut-over: {decision.reason}",
                )
                execute(plan, slot=facts_slot, engine=self.engine, reporter=self.reporter, hooks=self.hooks)
        except SlotBusy:
            return
        except DeploytoolError as exc:
            self._record("watch.rollback_failed", slot, release.release, reason=exc.message.splitlines()[0])
            self.reporter.warn(f"slot {slot}: rollback failed: {exc.message}")
            return
        self.states.pop(slot, None)
        self._record("watch.rolled_back", slot, plan.release, stopped=release.release, reason=decision.reason)

    def _record(self, event: str, slot: str, release: int | None, **fields: object) -> None:
        self.actions.append(journal(event, slot=slot, release=release, **fields))


def watch(
    options: WatchOptions | None = None,
    *,
    engine: Engine | None = None,
    reporter: Reporter | None = None,
    hooks: Hooks | None = None,
) -> WatchResult:
    """Supervise until Ctrl-C (or --once / --max-seconds)."""
    options = options or WatchOptions()
    engine = engine or Engine()
    supervisor = Supervisor(engine=engine, reporter=reporter or Reporter(), hooks=hooks or Hooks())
    result, started = WatchResult(), time.monotonic()
    journal("watch.start", slots=options.slots, once=options.once, max_seconds=options.max_seconds)
    try:
        while True:
            asked = supervisor.round(options.slots)
            result.rounds += 1
            elapsed = time.monotonic() - started
            if options.once or (options.max_seconds is not None and elapsed >= options.max_seconds):
                break
            pause = options.interval or asked
            if options.max_seconds is not None:
                pause = min(pause, max(0.0, options.max_seconds - elapsed))
            time.sleep(pause)
    except KeyboardInterrupt:
        pass  # Ctrl-C ends a foreground watch; what it did is in the journal
    finally:
        result.seconds = round(time.monotonic() - started, 1)
        result.actions = supervisor.actions
        journal("watch.stop", rounds=result.rounds, seconds=result.seconds)
    return result
