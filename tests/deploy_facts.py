"""Hand-made facts for the deploy planner: a release row and the facts an up or a rollback is
planned from, for the sim profile on the CPU slot."""

from __future__ import annotations

from deploytool.deploy.facts import CacheFacts, Facts, ImageFacts, PortFacts
from deploytool.host.gpus import Inventory
from deploytool.host.releases import Release
from deploytool.host.slots import Slot
from deploytool.profiles import HealthSpec, ProfileStore
from deploytool.release.state import SlotPointers

CPU = Slot()
SIM = ProfileStore().get("sim")


def release(
    number: int,
    state: str = "exited",
    port: int = 30000,
    image: str = "deploytool/sim:old",
    health: str | None = None,
) -> Release:
    return Release(
        slot="cpu",
        release=number,
        profile="sim",
        image=image,
        container_id=f"id{number}",
        container_name=f"deploytool-cpu-r{number}-server",
        state=state,
        health=health,
        host_port=port,
        gpus=[],
        simulator=True,
        created="",
    )


def facts(
    *releases: Release,
    current: int | None = None,
    previous: int | None = None,
    next_release: int = 1,
    port: PortFacts | None = None,
    image_present: bool = True,
    cache: CacheFacts | None = None,
    slot: Slot = CPU,
    inventory: Inventory | None = None,
) -> Facts:
    from deploytool.image.build import plan_build

    build = plan_build(SIM)
    return Facts(
        slot=slot,
        releases=list(releases),
        pointers=SlotPointers(current=current, previous=previous, next_release=next_release),
        health={r.release: HealthSpec(start_period=7) for r in releases},
        inventory=inventory,
        image=ImageFacts(
            build.tag,
            image_present,
            {} if image_present else None,
            "deploytool/base:bookworm",
            "sha256:base",
            build=build,
        ),
        port=port or PortFacts("127.0.0.1", 30000),
        cache=cache,
    )


def facts_with_memory(profile) -> Facts:
    """A CPU slot's facts for an `up` of `profile` whose memory gate plans it (the image as if
    built): the facts the start-up and memory-gate decisions are read from."""
    from deploytool.memory.gate import memory_facts

    return Facts(
        slot=CPU,
        releases=[],
        pointers=SlotPointers(next_release=3),
        image=_built(profile),
        port=PortFacts("127.0.0.1", 30000),
        memory=memory_facts(CPU, profile),
    )


def _built(profile) -> ImageFacts:
    """The image as if built, with the build plan gather_facts would carry."""
    from deploytool.image.build import plan_build

    build = plan_build(profile)
    return ImageFacts(build.tag, True, {}, "deploytool/base:bookworm", "sha256:base", build=build)
