"""What `deploytool watch` does about one slot, decided from what it observed: pure.

Docker restarts a container that exits (`restart: unless-stopped`) but never one that is
merely unhealthy: a wedged scheduler or a hung NCCL call stays "unhealthy" while the gateway
keeps routing to it. The supervisor probes each serving release and decides, per slot:

- healthy: nothing to do (the failure count starts again);
- failing fewer than `watch.failures` times in a row: wait;
- failing `failures` times in a row: restart the container, unless its backoff has not run
  out (it doubles after each restart, up to `backoff_max`) or `max_restarts_per_hour` are spent;
- failing again and again right after its cut-over (within `crash_loop_window` seconds,
  `crash_loop_restarts` restarts, the engine's own restarts of an exiting process counted
  with watch's): roll back to the slot's stopped previous release.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..profiles import WatchSpec

HOUR = 3600.0


@dataclass
class Observation:
    release: int
    healthy: bool
    engine_restarts: int  # the engine's restarts of this container since it was last started
    since_cutover: float | None  # seconds since this release took the slot (None: unknown)
    can_roll_back: bool  # the slot has a stopped previous release


@dataclass
class SlotWatch:
    """What the supervisor remembers about one slot between probes."""

    release: int | None = None
    failures: int = 0  # consecutive failed probes
    restarts: list[float] = field(default_factory=list)  # when watch restarted this release
    engine_restarts: int = 0  # the engine's restarts seen, summed over watch's restarts
    backoff: float = 0.0
    next_restart_at: float = 0.0
    capped_logged: bool = False


@dataclass
class Decision:
    action: Literal["ok", "wait", "restart", "rollback", "capped"]
    reason: str


def decide(state: SlotWatch, seen: Observation, policy: WatchSpec, now: float) -> Decision:
    """The action for this observation; updates `state` (the caller applies the action)."""
    if state.release != seen.release:  # a new release serves: start afresh
        state.__dict__.update(SlotWatch(release=seen.release).__dict__)
    loops = (
        len([t for t in state.restarts if seen.since_cutover is not None and now - t <= seen.since_cutover])
        + state.engine_restarts
        + seen.engine_restarts
    )
    in_window = seen.since_cutover is not None and seen.since_cutover <= policy.crash_loop_window
    crash_loop = (
        in_window and loops >= policy.crash_loop_restarts and (not seen.healthy or seen.engine_restarts)
    )
    if crash_loop and seen.can_roll_back:
        return Decision(
            "rollback",
            f"{loops} restarts within {seen.since_cutover:.0f} s of its cut-over "
            f"(crash loop: {policy.crash_loop_restarts} within "
            f"{policy.crash_loop_window:g} s)",
        )
    if seen.healthy:
        state.failures = 0
        return Decision("ok", "healthy")
    state.failures += 1
    if state.failures < policy.failures:
        return Decision("wait", f"health probe failed {state.failures} of {policy.failures} times in a row")
    recent = [t for t in state.restarts if now - t < HOUR]
    if len(recent) >= policy.max_restarts_per_hour:
        return Decision(
            "capped", f"{len(recent)} restarts in the last hour (cap {policy.max_restarts_per_hour})"
        )
    if now < state.next_restart_at:
        return Decision("wait", f"backing off: next restart in {state.next_restart_at - now:.0f} s")
    state.backoff = min(state.backoff * 2 if state.backoff else policy.backoff, policy.backoff_max)
    state.next_restart_at = now + state.backoff
    state.failures = 0
    state.restarts.append(now)
    state.engine_restarts += seen.engine_restarts  # a restart resets the engine's count
    state.capped_logged = False
    return Decision("restart", f"health probe failed {policy.failures} times in a row")
