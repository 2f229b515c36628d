"""`deploytool status`: what runs where, read from the engine's labels and the slot's pointers.

Two answers to "which release is current" can disagree, and status shows both: the release
that runs (what answers on the slot's port) and the slot's pointer (the release deploytool
last cut over to, and would roll back from). They part when a release dies after its
cut-over, or when a container is started or stopped behind deploytool's back.

Status only looks, so it reads the engine through engine_api (plain requests on the engine's
socket), not the Docker SDK that every command which acts loads: `deploytool status` with
nothing running answers in a fraction of the SDK's own import time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..host import engine_api
from ..host.releases import Release
from ..release.state import SlotPointers, read_journal, read_pointers

if TYPE_CHECKING:
    from ..host.engine import Engine


@dataclass
class SlotStatus:
    slot: str
    current: int | None  # the slot's pointer: the release deploytool last cut over to
    previous: int | None  # the pointer's rollback target
    serving: int | None  # the release that runs (the newest running one), None when none does
    serving_url: str | None
    disagreement: str | None  # why `current` and `serving` differ, when they do
    releases: list[dict[str, Any]]
    last_events: list[dict[str, Any]]


def status(engine: Engine | None = None, *, events: int = 5) -> list[SlotStatus]:
    by_slot: dict[str, list[Release]] = {}
    for release in _releases(engine):
        by_slot.setdefault(release.slot, []).append(release)
    result = []
    for name, releases in sorted(by_slot.items()):
        pointers = read_pointers(name)
        running = [r for r in releases if r.running or r.state == "restarting"]
        serving = max(running, key=lambda r: r.release) if running else None
        rows = []
        for r in sorted(releases, key=lambda r: r.release, reverse=True):
            # A stopped container keeps its last health status; it says nothing about now.
            health = r.health if r.running else None
            rows.append(
                {
                    "release": r.release,
                    "role": role(r.release, pointers, serving),
                    "state": r.state,
                    "health": health,
                    "profile": r.profile,
                    "image": r.image,
                    "url": r.url,
                    "gpus": r.gpus,
                    "simulator": r.simulator,
                    "container": r.container_name,
                    "created": r.created,
                    # which weights it serves, and whether callers need a key
                    "model": r.model or None,
                    "api_key": "required" if r.api_key else "none",
                    "host_ip": r.host_ip,
                }
            )
        result.append(
            SlotStatus(
                slot=name,
                current=pointers.current,
                previous=pointers.previous,
                serving=serving.release if serving else None,
                serving_url=serving.url if serving else None,
                disagreement=disagreement(pointers, serving, releases),
                releases=rows,
                last_events=read_journal(name, limit=events),
            )
        )
    return result


def role(number: int, pointers: SlotPointers, serving: Release | None) -> str:
    """A release's part in its slot. When pointer and engine agree: current, rollback target.
    When they do not, each side is named: the pointer's current that does not run is
    'current (not serving)', a running release the pointer does not name is 'serving'."""
    serves = serving is not None and serving.release == number
    parts = []
    if number == pointers.current:
        parts.append("current" if serves else "current (not serving)")
    elif serves:
        parts.append("serving")
    if number == pointers.previous:
        parts.append("rollback target")
    return ", ".join(parts)


def disagreement(pointers: SlotPointers, serving: Release | None, releases: list[Release]) -> str | None:
    """One sentence when the running release is not the slot's pointer; None when they agree."""
    if serving is not None and serving.release == pointers.current:
        return None
    if serving is None and pointers.current is None:
        return None
    if pointers.current is None and serving is not None:  # (both None returned above)
        return (
            f"release {serving.release} runs, but this state directory has no pointer for the slot "
            "(another DEPLOYTOOL_HOME or DEPLOYTOOL_INSTANCE started it?)"
        )
    pointed = next((r for r in releases if r.release == pointers.current), None)
    where = (
        "its container is gone"
        if pointed is None
        else f"its container is {pointed.state}"
        + (f" after {pointed.restart_count} restarts" if pointed.restart_count else "")
    )
    if serving is None:
        return f"the slot's pointer says release {pointers.current} is current, but nothing runs ({where})"
    return (
        f"the slot's pointer says release {pointers.current} is current ({where}), "
        f"but release {serving.release} is what runs"
    )


def _releases(engine: Engine | None) -> list[Release]:
    if engine is not None:
        return engine.releases()
    found = engine_api.read_releases()
    if found is None:  # DOCKER_HOST is an address only the SDK reaches (TLS, ssh)
        from ..host.engine import Engine

        found = Engine().releases()
    return found
