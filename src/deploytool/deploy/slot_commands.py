"""`stop`, `start`, `down` and `logs`: a slot taken out of service, put back, removed, read.

Each gathers the slot's facts, plans (slot_plan.py: refusals before any step) and executes
the plan under the slot's lock, as `up` and `rollback` do: a slot that `watch` or a rollout
holds is refused at once, naming the holder, and nothing changes. `logs` only reads.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import DeployError, FieldError
from ..host.engine import Engine
from ..host.releases import Release
from ..host.slots import Slot
from ..release.inputs import hold_release_secrets
from ..release.state import journal, slot_lock, slot_path
from .executor import execute
from .facts import gather_slot
from .hooks import Hooks
from .log_lines import log_lines
from .reporter import Reporter
from .slot_plan import plan_down, plan_start, plan_stop
from .steps import Plan


@dataclass
class SlotResult:
    slot: str
    action: str
    release: int | None  # the release stopped or started
    url: str | None = None
    drains: list[dict[str, Any]] = field(default_factory=list)  # what each stop waited for
    removed: list[str] = field(default_factory=list)  # what `down` removed
    seconds: float = 0.0
    in_place_of: int | None = None  # start --release N: the slot's current release it was started instead of

    def line(self) -> str:
        drained = "".join(f"; drain: {_drain_text(d)}" for d in self.drains)
        if self.action == "stop":
            return (
                f"slot {self.slot}: release {self.release} stopped (kept for `deploytool start` and rollback)"
                f"{drained} ({self.seconds} s)"
            )
        if self.action == "start":
            instead = (
                f" in place of release {self.in_place_of}, the slot's current release until now"
                if self.in_place_of is not None
                else ""
            )
            return f"slot {self.slot}: release {self.release} serves again at {self.url}{instead} ({self.seconds} s)"
        return f"slot {self.slot} removed: {', '.join(self.removed) or 'nothing'}{drained} ({self.seconds} s)"


def _drain_text(d: dict[str, Any]) -> str:
    if d.get("at_start") is None:
        return f"not counted ({d.get('why')})"
    if d.get("drained"):
        return f"waited for {d['at_start']} request(s), {d['waited_s']} s"
    return f"{d['left']} request(s) cut at the {d['timeout_s']:g} s timeout"


def plan_for_stop(
    slot: Slot, *, engine: Engine | None = None, drain_timeout: float | None = None, take_over: bool = False
) -> Plan:
    return plan_stop(gather_slot(engine or Engine(), slot), drain_timeout, take_over=take_over)


def plan_for_start(
    slot: Slot, *, engine: Engine | None = None, release: int | None = None, take_over: bool = False
) -> Plan:
    return plan_start(gather_slot(engine or Engine(), slot), release, take_over=take_over)


@dataclass(frozen=True)
class DownRequest:
    """One `down`: the slot; `volumes`: its JIT cache volume and state folder go too;
    `drain_timeout`: the serving release's drain (None: its recorded health.drain_timeout);
    `take_over`: a release started from another state folder is removed all the same."""

    slot: Slot
    volumes: bool = False
    drain_timeout: float | None = None
    take_over: bool = False


def plan_for_down(request: DownRequest, *, engine: Engine | None = None) -> Plan:
    slot, volumes = request.slot, request.volumes
    engine = engine or Engine()
    facts = gather_slot(engine, slot)
    has_volume, has_state = engine.volume_exists(slot.cache_volume()), _holds_state(slot_path(slot.name))
    there = {
        f"its JIT cache volume {slot.cache_volume()}": has_volume,
        f"its state folder {slot_path(slot.name)}": has_state,
    }
    volume = slot.cache_volume() if volumes and has_volume else None
    state = str(slot_path(slot.name)) if volumes and has_state else None
    return plan_down(
        facts,
        networks=engine.slot_networks(slot.name),
        volume=volume,
        state=state,
        drain_timeout=request.drain_timeout,
        take_over=request.take_over,
        kept=[] if volumes else [what for what, yes in there.items() if yes],
    )


def _holds_state(folder: Path) -> bool:
    """Whether the slot's state folder holds anything of the slot's: the lock every command
    takes there (this one's too) is not state."""
    try:
        return any(p.name not in ("lock", "lock.holder") for p in folder.iterdir())
    except OSError:
        return False


def stop(
    slot: Slot,
    *,
    reporter: Reporter | None = None,
    engine: Engine | None = None,
    hooks: Hooks | None = None,
    drain_timeout: float | None = None,
    take_over: bool = False,
) -> SlotResult:
    """Drain (the pre-stop hook, then the server's own count) and stop the serving release."""
    engine = engine or Engine()
    with slot_lock(slot.name, "stop"):
        plan = plan_for_stop(slot, engine=engine, drain_timeout=drain_timeout, take_over=take_over)
        outcome = execute(plan, slot=slot, engine=engine, reporter=reporter, hooks=hooks)
        journal("slot.stopped", slot=slot.name, release=plan.release)
    return SlotResult(
        slot.name, "stop", plan.release, plan.url, drains=outcome.drains, seconds=outcome.seconds
    )


def start(
    slot: Slot,
    *,
    reporter: Reporter | None = None,
    engine: Engine | None = None,
    hooks: Hooks | None = None,
    release: int | None = None,
    take_over: bool = False,
) -> SlotResult:
    """Start the slot's current release again (or `release`, in its place) and verify it healthy."""
    engine = engine or Engine()
    with slot_lock(slot.name, "start"):
        plan = plan_for_start(slot, engine=engine, release=release, take_over=take_over)
        outcome = execute(plan, slot=slot, engine=engine, reporter=reporter, hooks=hooks)
        journal(
            "slot.started",
            slot=slot.name,
            release=plan.release,
            **({"in_place_of": plan.in_place_of} if plan.in_place_of is not None else {}),
        )
    assert outcome.serving is not None
    return SlotResult(
        slot.name,
        "start",
        plan.release,
        outcome.serving.url,
        seconds=outcome.seconds,
        in_place_of=plan.in_place_of,
    )


def down(
    request: DownRequest,
    *,
    reporter: Reporter | None = None,
    engine: Engine | None = None,
    hooks: Hooks | None = None,
) -> SlotResult:
    """Say what goes, then stop what serves and remove every release of the slot, its compose
    projects and networks; with `volumes`, its JIT cache volume and its state folder."""
    slot = request.slot
    engine, reporter = engine or Engine(), reporter or Reporter()
    with slot_lock(slot.name, "down"):
        plan = plan_for_down(request, engine=engine)
        for number, step in enumerate(plan.steps, 1):
            reporter.step(f"goes: {number}. {step.describe()}")
        if plan.restore:  # not what goes: what comes back if a step fails before the release is removed
            reporter.step(
                f"if a step fails before release {plan.fallback} is removed, it is brought back: "
                + "; ".join(s.describe() for s in plan.restore)
            )
        outcome = execute(plan, slot=slot, engine=engine, reporter=reporter, hooks=hooks)
    return SlotResult(
        slot.name,
        "down",
        plan.release,
        drains=outcome.drains,
        removed=outcome.removed,
        seconds=outcome.seconds,
    )


# -- logs --------------------------------------------------------------------------------------
_SINCE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str | None, now: float | None = None) -> float | None:
    """`--since`: a duration back from now (30s, 10m, 2h, 1d) or an ISO 8601 time; epoch seconds."""
    if text is None:
        return None
    now = time.time() if now is None else now
    found = _SINCE.match(text.strip())
    if found:
        return now - float(found.group(1)) * _UNIT[found.group(2)]
    try:
        return datetime.fromisoformat(text.strip().replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise FieldError(
            "since", "expected a duration (30s, 10m, 2h, 1d) or an ISO 8601 time", value=repr(text)
        ) from None


def log_release(slot: Slot, number: int | None, *, engine: Engine) -> Release:
    """--release N, else the serving release, else the slot's current one, else its newest."""
    releases = engine.releases(slot.name)
    if not releases:
        raise DeployError(
            f"slot {slot.name} has no release on this engine, so no log",
            hint="`deploytool status` lists the slots and their releases",
        )
    if number is not None:
        found = next((r for r in releases if r.release == number), None)
        if found is None:
            raise DeployError(
                f"release {number} of slot {slot.name} is not on this engine "
                f"(kept: {', '.join(str(r.release) for r in releases)})"
            )
        return found
    facts = gather_slot(engine, slot)
    return facts.serving or facts.by_number(facts.pointers.current) or releases[-1]


class SlotNotice(str):
    """A line deploytool says in a followed log (not the server's): the slot's serving release
    changed, and the lines after it are the new release's."""

    release: int
    was: int

    @classmethod
    def changed(cls, slot: Slot, release: int, was: int) -> SlotNotice:
        notice = cls(
            f"deploytool: slot {slot.name} is served by release {release} now "
            f"(was release {was}); its log follows"
        )
        notice.release, notice.was = release, was
        return notice


def _started_epoch(release: Release) -> float | None:
    """The engine's StartedAt (RFC 3339, nanoseconds) in epoch seconds; None when unknown."""
    found = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$", release.started)
    if not found or found.group(1).startswith("0001"):
        return None
    whole = datetime.fromisoformat(found.group(1) + found.group(3).replace("Z", "+00:00")).timestamp()
    return whole + float(f"0.{found.group(2) or 0}")


@dataclass(frozen=True)
class LogsRequest:
    """One `logs`: the slot; `release`: a kept release's log instead of the serving one's; the
    last `tail` lines; the lines since `since` (epoch seconds: parse_since reads the option once,
    where the request is built); `follow`: on until Ctrl-C."""

    slot: Slot
    release: int | None = None
    tail: int | None = None
    since: float | None = None
    follow: bool = False

    def __post_init__(self) -> None:
        if self.tail is not None and self.tail < 0:
            raise FieldError("tail", "expected 0 lines or more", value=str(self.tail))


def logs(request: LogsRequest, *, engine: Engine | None = None, poll_s: float = 0.5) -> Iterator[str]:
    """The release's server log, line by line. With `follow`, it goes on until Ctrl-C: across a
    restart of the release (a crash that Docker or `watch` restarts, a `stop` then `start`), and,
    without `release`, across a change of the slot's serving release (a new `up`, a rollback):
    a SlotNotice says so, then the new release's log from its start follows."""
    slot, release, tail, start_at = request.slot, request.release, request.tail, request.since
    engine = engine or Engine()
    chosen = log_release(slot, release, engine=engine)
    hold_release_secrets(slot.name, chosen.release)
    if not request.follow:
        yield from log_lines([engine.logs(chosen, tail=tail, since=start_at)])
        return
    while True:
        yield from _stream(engine, chosen, tail=tail, since=start_at)
        start_at, tail = time.time(), None  # after a restart: what it writes from now on
        while True:  # the stream ended: the container stopped; wait until it, or the slot, runs again
            time.sleep(poll_s)
            now = engine.releases(slot.name)
            again = next((r for r in now if r.release == chosen.release), None)
            if again is not None and (again.running or again.state == "restarting"):
                chosen = again
                break
            serving = max(
                (r for r in now if r.running or r.state == "restarting"),
                key=lambda r: r.release,
                default=None,
            )
            if release is None and serving is not None:  # following the slot: another release serves
                yield SlotNotice.changed(slot, serving.release, chosen.release)
                chosen, start_at = serving, _started_epoch(serving)
                hold_release_secrets(slot.name, chosen.release)
                break
            if again is None and (release is not None or not now):
                return  # removed (`down`, prune): nothing more will be written


def _stream(engine: Engine, release: Release, *, tail: int | None, since: float | None) -> Iterator[str]:
    """One release's log, followed until its container stops, line by line."""
    yield from log_lines(engine.logs(release, tail=tail, since=since, follow=True))
