"""Taking a slot out of service, putting it back, removing it: pure plans from the slot's facts.

    stop   drain and stop the serving release; every release is kept (start, rollback)
    start  start the slot's current release again and verify it healthy
    down   stop what serves, remove every release of the slot (container, compose project and
           its network); with --volumes its JIT cache volume and its state folder too

A slot with nothing to do is refused here, before any step, saying what the slot holds.
"""

from __future__ import annotations

from ..errors import DeployError
from .facts import Facts
from .plan import bring_back, drain_for
from .steps import CutOver, Plan, Remove, RemoveSlot, Step, Stop


def plan_stop(facts: Facts, drain_timeout: float | None = None) -> Plan:
    slot, serving = facts.slot, facts.serving
    if serving is None:
        kept = ", ".join(str(r.release) for r in facts.releases) or "none"
        raise DeployError(f"slot {slot.name} has nothing to stop: no release of it runs (releases kept: {kept})",
                          hint=f"`deploytool start {slot.option}` starts its current release again" if facts.releases
                          else f"`deploytool up {slot.option} --profile NAME` makes its first release")
    steps: list[Step] = [Stop(release=serving.release, container=serving.container_name,
                              reason="taken out of service; kept for start and rollback", url=serving.url,
                              drain_s=drain_for(facts, serving.release, drain_timeout))]
    # a stop that fails (or Ctrl-C during the drain) leaves the release serving, verified healthy
    return Plan(action="stop", slot=slot.name, release=serving.release, serving=serving.release,
                fallback=serving.release, steps=steps, restore=bring_back(facts, serving), url=serving.url,
                profile=serving.profile, image=serving.image)


def plan_start(facts: Facts) -> Plan:
    slot, serving = facts.slot, facts.serving
    if serving is not None:
        raise DeployError(f"release {serving.release} already serves on slot {slot.name} at {serving.url}",
                          hint="nothing to start; `deploytool stop` takes it out of service")
    target = facts.by_number(facts.pointers.current)
    if target is None:
        if not facts.releases:
            raise DeployError(f"slot {slot.name} has no release to start",
                              hint=f"`deploytool up {slot.option} --profile NAME` makes its first release")
        target = max(facts.releases, key=lambda r: r.release)  # no pointer (a crash mid-up): the newest
    # the cut-over records it as current (a crash mid-up may have left no pointer) and runs the
    # post-cutover hook, which puts the slot back into the gateway that `stop`'s pre-stop took it out of
    steps = bring_back(facts, target) + [CutOver(release=target.release, previous=facts.pointers.previous,
                                                 next_release=max(facts.pointers.next_release, target.release + 1))]
    return Plan(action="start", slot=slot.name, release=target.release, serving=None, fallback=None, steps=steps,
                restore=[Stop(release=target.release, container=target.container_name,
                              reason="failed to start, kept for inspection", only_if_running=True)],
                url=target.url, profile=target.profile, image=target.image)


def plan_down(facts: Facts, *, networks: list[str], volume: str | None, state: str | None,
              drain_timeout: float | None = None, kept: list[str] | None = None) -> Plan:
    """`volume` and `state`: what --volumes removes (None: not asked, or not there); `kept`:
    what is there and stays because --volumes was not given (said, never called absent)."""
    slot, serving = facts.slot, facts.serving
    if not facts.releases and not networks and volume is None and state is None:
        if kept:
            raise DeployError(f"slot {slot.name} has no release or network left to remove; still there: "
                              f"{' and '.join(kept)}",
                              hint=f"`deploytool down {slot.option} --volumes` removes them too")
        raise DeployError(f"slot {slot.name} has nothing to remove: no release, network, cache volume or state",
                          hint="`deploytool status` lists the slots of this engine")
    steps: list[Step] = []
    if serving is not None:
        steps.append(Stop(release=serving.release, container=serving.container_name,
                          reason="taking the slot down", url=serving.url,
                          drain_s=drain_for(facts, serving.release, drain_timeout)))
    steps += [Remove(release=r.release, project=slot.project(r.release), container=r.container_name)
              for r in sorted(facts.releases, key=lambda r: r.release)]
    steps.append(RemoveSlot(networks=networks, volume=volume, state=state))
    restore = bring_back(facts, serving) if serving is not None else []
    return Plan(action="down", slot=slot.name, release=serving.release if serving else None,
                serving=serving.release if serving else None, fallback=serving.release if serving else None,
                steps=steps, restore=restore)
