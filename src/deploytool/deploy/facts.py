"""What a deploy decision needs to know, read in one place and written nowhere.

gather_facts() reads the slot's releases (the engine's labels), the pointers, which release
serves, whether the port is free, whether the image is on the engine (and its labels), the
base image's id, the cache volume's fingerprint, the slot's cards, the weights and the places
of the secrets (release_inputs; no value kept) and what the memory plan reads (the card, the
checkpoint's config). It creates no file, no container that outlives it, no journal line:
`up --dry-run` runs it and nothing changes.
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import DeploytoolError
from ..host.engine import Engine
from ..host.gpus import Inventory, read_inventory
from ..host.releases import Release
from ..host.slots import Slot
from ..image.build import BuildPlan, plan_build
from ..memory.gate import MemoryFacts, memory_facts
from ..profiles import HealthSpec, Profile
from ..release import cache
from ..release import inputs as release_inputs
from ..release.state import SlotPointers, home, read_pointers, release_path
from .no_engine import NoEngine


@dataclass
class ImageFacts:
    reference: str
    present: bool
    labels: dict[str, str] | None  # None when absent
    base_ref: str
    base_id: str | None  # None when the base is not on this engine
    # the build plan the reference came from, so that planning the up does not derive it again
    # (hashing the recipe's inputs is the slowest part of planning); None in hand-made facts
    build: BuildPlan | None = field(default=None, repr=False, compare=False)
    wheelhouse: Path | None = None  # the wheelhouse that build plan was made with


@dataclass
class PortFacts:
    bind: str
    port: int
    holder: str | None = None  # who holds it, when taken ("another process", a release)
    holder_release: tuple[str, int] | None = None  # (slot, release) when a release of ours holds it
    error: str | None = None  # the port cannot be published at all (bad address, ...)

    @property
    def free(self) -> bool:
        return self.holder is None and self.error is None


@dataclass
class CacheFacts:
    state: cache.CacheState | None  # None when no image was there to read the volume with
    expected: dict[str, Any] | None  # None until the new image is on the engine


@dataclass
class Facts:
    slot: Slot
    releases: list[Release]
    pointers: SlotPointers
    health: dict[int, HealthSpec] = field(default_factory=dict)  # each release's recorded budget
    inventory: Inventory | None = None  # None for the CPU slot
    image: ImageFacts | None = None
    port: PortFacts | None = None
    cache: CacheFacts | None = None
    model_folder_exists: bool | None = None  # the profile's model.host_path on this host; None if unset
    memory: MemoryFacts | None = None  # the card and checkpoint shape the memory plan reads
    # the weights checked on this host and the secrets' places (values dropped: facts
    # and plans never hold a secret; the executor's Start reads them again), or why they fail.
    inputs: release_inputs.ReleaseInputs | None = None
    inputs_error: DeploytoolError | None = None
    engine_absent: str | None = None  # a dry run's reason that no engine answered (no_engine.py)
    # the releases whose record (release.json) this state folder keeps: `up` writes it before the
    # container starts, so a release without one was started from another state folder (ownership.py);
    # None in hand-made facts: every release counts as this folder's
    recorded: frozenset[int] | None = None
    state_folder: str | None = None  # this state folder (DEPLOYTOOL_HOME), for the refusal's words

    @property
    def serving(self) -> Release | None:
        running = [r for r in self.releases if r.running or r.state == "restarting"]
        return max(running, key=lambda r: r.release) if running else None

    @property
    def fallback(self) -> Release | None:
        """What a failed up brings back: the serving release, else the last one cut over."""
        return self.serving or self.by_number(self.pointers.current)

    def by_number(self, number: int | None) -> Release | None:
        return next((r for r in self.releases if r.release == number), None)

    def foreign(self, release: Release | None) -> bool:
        """Started from another state folder: this one keeps no record of it."""
        return release is not None and self.recorded is not None and release.release not in self.recorded


def gather_slot(engine: Engine, slot: Slot) -> Facts:
    """The slot alone: its releases, pointers and the recorded health budgets."""
    releases = engine.releases(slot.name)
    return Facts(
        slot=slot,
        releases=releases,
        pointers=read_pointers(slot.name),
        health={r.release: release_inputs.release_health(slot.name, r.release) for r in releases},
        engine_absent=engine.absent_reason if isinstance(engine, NoEngine) else None,
        recorded=frozenset(
            r.release for r in releases if (release_path(slot.name, r.release) / "release.json").is_file()
        ),
        state_folder=str(home()),
    )


def gather_facts(
    engine: Engine,
    slot: Slot,
    profile: Profile,
    *,
    host_port: int | None,
    bind: str,
    wheelhouse: Path | None = None,
    publishes: bool = True,
    known: Facts | None = None,
) -> Facts:
    """Everything plan_up needs for `profile` on `slot` (`wheelhouse`: the image's tag is the
    one `build --wheelhouse` makes; `publishes`: False when nothing will listen on the port, which
    is then not probed; `known`: the slot's own facts, read already by gather_slot to choose the
    profile, which are then not read again)."""
    facts = known if known is not None else gather_slot(engine, slot)
    facts.inventory = None if slot.is_cpu else read_inventory()
    build = plan_build(profile, wheelhouse=wheelhouse)
    present = engine.image(build.tag)
    base = engine.image(build.base_ref)
    facts.image = ImageFacts(
        reference=build.tag,
        present=present is not None,
        labels=dict(present.labels or {}) if present is not None else None,
        base_ref=build.base_ref,
        base_id=base.id if base is not None else None,
        build=build,
        wheelhouse=wheelhouse,
    )
    facts.port = port_facts(engine, bind, host_port or profile.server.port) if publishes else None
    facts.cache = _cache_facts(engine, slot, facts)
    if profile.model.host_path:
        facts.model_folder_exists = Path(profile.model.host_path).is_dir()
    try:  # the weights are checked here once: the memory gate reads the snapshot this check found
        facts.inputs = replace(release_inputs.prepare(profile, bind=bind), secret_env={}, api_key=None)
    except DeploytoolError as exc:  # a missing checkpoint, an unreadable secret: refused in planning
        facts.inputs_error = exc
    # without inputs the plan is refused before its memory check, unless the weights are not
    # here, where the memory gate reads the profile's own folders (as it would without a check)
    facts.memory = memory_facts(
        slot, profile, facts.inventory, weights=facts.inputs.model if facts.inputs else None
    )
    return facts


def port_facts(engine: Engine, bind: str, port: int) -> PortFacts:
    """Is the port free to publish on, with the bind the engine would do? Who holds it?"""
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((bind, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                return PortFacts(bind, port, error=exc.strerror)
            holder = next((r for r in engine.releases() if r.running and r.host_port == port), None)
            who = (
                f"release {holder.release} of slot {holder.slot} ({holder.container_name})"
                if holder
                else "another process"
            )
            return PortFacts(
                bind, port, holder=who, holder_release=(holder.slot, holder.release) if holder else None
            )
    return PortFacts(bind, port)


def _cache_facts(engine: Engine, slot: Slot, facts: Facts) -> CacheFacts:
    """The volume read with the new image, else with the fallback's (any image with a shell
    reads it); the expected fingerprint only when the new image is there to say it."""
    image = facts.image
    reader = (
        image.reference if image and image.present else (facts.fallback.image if facts.fallback else None)
    )
    state: cache.CacheState | None
    expected: dict[str, Any] | None
    try:
        if image and image.present:  # one container reads the volume and the image's toolchain
            state, expected = cache.state_and_expected(engine, image.reference, slot)
        else:
            state, expected = cache.read_state(engine, reader, slot) if reader else None, None
    except DeploytoolError:  # an unreadable volume is decided when the step runs
        return CacheFacts(None, None)
    return CacheFacts(state, expected)
