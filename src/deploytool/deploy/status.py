"""`deploytool status`: what runs where, read from the engine's labels and the pointers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..host.engine import Engine, Release
from ..release.state import read_journal, read_pointers


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
        running = [r for r in releases if r.running or r.state == "restarting"]
        serving = max(running, key=lambda r: r.release) if running else None
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
