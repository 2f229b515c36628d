"""The plans of a tune search on a Docker slot, pure like plan_up and applied by the same executor.

    plan_pause_serving   before the first candidate: the release that serves stops (a slot
                         serves one container); a failed stop brings it back healthy
    plan_candidate       a candidate as a release of the slot: the same checks, image and compose
                         document as `up`'s release (plan.NewRelease), its own steps: no hand-over,
                         qualify, cut-over or pruning, so it never becomes the slot's release
    plan_candidate_stop  a candidate measured (or failed): its container stops
    plan_search_end      the candidates removed, the release that served brought back

Each lists its steps itself: a change to what `up` runs does not change what a candidate runs.
"""

from __future__ import annotations

from ..host.releases import Release
from ..host.slots import Slot
from ..profiles import Profile
from .facts import Facts
from .plan import bring_back, new_release
from .steps import Plan, Prune, Step, Stop
from .up_checks import UpOptions

__all__ = ["CANDIDATE_BIND", "plan_candidate", "plan_candidate_stop", "plan_pause_serving", "plan_search_end"]

CANDIDATE_BIND = "127.0.0.1"  # a candidate answers the search's own client, on this host only


def plan_candidate(facts: Facts, profile: Profile, *, host_port: int) -> Plan:
    """Build, record, start and verify healthy one candidate, published on `host_port`. A failed
    start stops it and brings nothing back: the search brings back what served when it ends."""
    new = new_release(
        facts,
        profile,
        UpOptions(profile_name=profile.name, host_port=host_port, bind=CANDIDATE_BIND, skip_qualify=True),
    )
    steps: list[Step] = [
        new.build_step(),
        new.write_step(),
        new.cache_step(),
        new.start_step(),
        new.wait_step(),
    ]
    return new.plan("tune", steps=steps, restore=[new.stop_step("candidate failed to start")], fallback=None)


def plan_pause_serving(facts: Facts) -> Plan | None:
    """The slot's serving release stopped for the search (None: nothing serves)."""
    release = facts.serving
    if release is None:
        return None
    stop = Stop(
        release=release.release,
        container=release.container_name,
        reason="tune measures candidates on this slot; brought back when it ends",
        url=release.url,
    )
    return Plan(
        action="tune",
        slot=facts.slot.name,
        release=None,
        serving=release.release,
        fallback=release.release,
        steps=[stop],
        restore=bring_back(facts, release),
    )


def plan_candidate_stop(slot: Slot, release: int) -> Plan:
    stop = Stop(
        release=release,
        container=f"{slot.project(release)}-server",
        reason="candidate measured",
        only_if_running=True,
    )
    return Plan(action="tune", slot=slot.name, release=None, serving=None, fallback=None, steps=[stop])


def plan_search_end(facts: Facts, made: list[int], serving: Release | None) -> Plan:
    """The candidates' containers stopped and removed; `serving` (what served when the search
    began) started again and verified healthy, as a rollback does."""
    slot = facts.slot
    steps: list[Step] = [
        Stop(
            release=n,
            container=f"{slot.project(n)}-server",
            reason="tune candidate done",
            only_if_running=True,
        )
        for n in made
    ]
    steps.append(Prune(releases=list(made), retention=0))
    if serving is not None:
        steps += bring_back(facts, serving)
    return Plan(action="tune", slot=slot.name, release=None, serving=None, fallback=None, steps=steps)
