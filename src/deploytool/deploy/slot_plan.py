"""Taking a slot out of service, putting it back, removing it: pure plans from the slot's facts.

    stop   drain and stop the serving release; every release is kept (start, rollback)
    start  start the slot's current release again and verify it healthy; another kept release
           only when named (--release N), never in the current one's place unasked
    down   stop what serves, remove every release of the slot (container, compose project and
           its network); with --volumes its JIT cache volume and its state folder too

A slot with nothing to do is refused here, before any step, saying what the slot holds.
"""

from __future__ import annotations

from ..errors import DeployError
from .facts import Facts
from .ownership import refuse_taking_over
from .plan import bring_back, drain_for
from .steps import CutOver, Plan, Remove, RemoveSlot, Step, Stop


def plan_stop(facts: Facts, drain_timeout: float | None = None, *, take_over: bool = False) -> Plan:
    slot, serving = facts.slot, facts.serving
    refuse_taking_over(facts, [serving], "stop", take_over)
    if serving is None:
        kept = ", ".join(str(r.release) for r in facts.releases) or "none"
        raise DeployError(
            f"slot {slot.name} has nothing to stop: no release of it runs (releases kept: {kept})",
            hint=f"`deploytool start {slot.option}` starts its current release again"
            if facts.releases
            else f"`deploytool up {slot.option} --profile NAME` makes its first release",
        )
    steps: list[Step] = [
        Stop(
            release=serving.release,
            container=serving.container_name,
            reason="taken out of service; kept for start and rollback",
            url=serving.url,
            drain_s=drain_for(facts, serving.release, drain_timeout),
        )
    ]
    # a stop that fails (or Ctrl-C during the drain) leaves the release serving, verified healthy
    return Plan(
        action="stop",
        slot=slot.name,
        release=serving.release,
        serving=serving.release,
        fallback=serving.release,
        steps=steps,
        restore=bring_back(facts, serving),
        url=serving.url,
        profile=serving.profile,
        image=serving.image,
    )


def plan_start(facts: Facts, release: int | None = None, *, take_over: bool = False) -> Plan:
    """The slot's current release, or `release` when named (in place of the current one, which
    the plan says). A current release that is gone is refused, naming the ways on: starting the
    newest release instead would bring back one the slot may have been rolled back from."""
    slot, serving = facts.slot, facts.serving
    if serving is not None:
        raise DeployError(
            f"release {serving.release} already serves on slot {slot.name} at {serving.url}",
            hint="nothing to start; `deploytool stop` takes it out of service",
        )
    current = facts.pointers.current
    target = facts.by_number(current if release is None else release)
    if target is None:
        raise _no_start(facts, release)
    refuse_taking_over(facts, [target], "start", take_over)
    in_place_of = current if current is not None and current != target.release else None
    previous = facts.pointers.previous
    if in_place_of is not None and facts.by_number(in_place_of) is not None:
        previous = in_place_of  # a rollback goes back to the release it was started in place of
    elif previous == target.release:
        previous = None
    # the cut-over records it as current and runs the post-cutover hook, which puts the slot
    # back into the gateway that `stop`'s pre-stop took it out of
    steps = [
        *bring_back(facts, target),
        CutOver(
            release=target.release,
            previous=previous,
            next_release=max(facts.pointers.next_release, target.release + 1),
        ),
    ]
    return Plan(
        action="start",
        slot=slot.name,
        release=target.release,
        serving=None,
        fallback=None,
        steps=steps,
        restore=[
            Stop(
                release=target.release,
                container=target.container_name,
                reason="failed to start, kept for inspection",
                only_if_running=True,
            )
        ],
        url=target.url,
        profile=target.profile,
        image=target.image,
        in_place_of=in_place_of,
    )


def _no_start(facts: Facts, release: int | None) -> DeployError:
    """Why nothing can be started, and the ways on: a new release, the rollback target, a kept one."""
    slot, current, previous = facts.slot, facts.pointers.current, facts.pointers.previous
    kept = sorted(r.release for r in facts.releases)
    if not kept:
        return DeployError(
            f"slot {slot.name} has no release to start",
            hint=f"`deploytool up {slot.option} --profile NAME` makes its first release",
        )
    listed = ", ".join(str(n) for n in kept)
    if release is not None:
        return DeployError(
            f"release {release} of slot {slot.name} is not on this engine (kept: {listed})",
            hint=f"`deploytool start {slot.option} --release N` names one of those",
        )
    if current is None:
        what = f"slot {slot.name} has no current release in this state folder (kept on the engine: {listed})"
    else:
        what = (
            f"slot {slot.name}'s current release {current} is not on this engine: its container was removed "
            f"outside deploytool (kept: {listed}); nothing was started in its place"
        )
    ways = [f"`deploytool up {slot.option} --profile NAME` makes a new release"]
    if previous is not None and previous in kept:
        ways.append(f"`deploytool rollback {slot.option}` starts the rollback target, release {previous}")
    ways.append(
        f"`deploytool start {slot.option} --release N` starts a kept release (N: {listed}) in place of "
        "the current one"
    )
    return DeployError(what, hint="; ".join(ways))


def plan_down(
    facts: Facts,
    *,
    networks: list[str],
    volume: str | None,
    state: str | None,
    drain_timeout: float | None = None,
    take_over: bool = False,
    kept: list[str] | None = None,
) -> Plan:
    """`volume` and `state`: what --volumes removes (None: not asked, or not there); `kept`:
    what is there and stays because --volumes was not given (said, never called absent)."""
    slot, serving = facts.slot, facts.serving
    refuse_taking_over(facts, list(facts.releases), "down", take_over)
    if not facts.releases and not networks and volume is None and state is None:
        if kept:
            raise DeployError(
                f"slot {slot.name} has no release or network left to remove; still there: "
                f"{' and '.join(kept)}",
                hint=f"`deploytool down {slot.option} --volumes` removes them too",
            )
        raise DeployError(
            f"slot {slot.name} has nothing to remove: no release, network, cache volume or state",
            hint="`deploytool status` lists the slots of this engine",
        )
    steps: list[Step] = []
    if serving is not None:
        steps.append(
            Stop(
                release=serving.release,
                container=serving.container_name,
                reason="taking the slot down",
                url=serving.url,
                drain_s=drain_for(facts, serving.release, drain_timeout),
            )
        )
    steps += [
        Remove(release=r.release, project=slot.project(r.release), container=r.container_name)
        for r in sorted(facts.releases, key=lambda r: r.release)
    ]
    steps.append(RemoveSlot(networks=networks, volume=volume, state=state))
    restore = bring_back(facts, serving) if serving is not None else []
    return Plan(
        action="down",
        slot=slot.name,
        release=serving.release if serving else None,
        serving=serving.release if serving else None,
        fallback=serving.release if serving else None,
        steps=steps,
        restore=restore,
    )
