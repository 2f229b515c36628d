"""The monitor's scrape targets (Prometheus file_sd): the release each slot serves, from the
engine's labels and the slot's pointer, labelled with slot, release, profile and card.

Written by `monitor up`, and again after every cut-over and rollback (deploy's executor calls
write_if_monitored), so Prometheus, which re-reads the file when it changes, always scrapes what
serves: the pointer's release when it runs, else the slot's newest running one, from the moment
its health check passed. A release that was cut over from is not listed, so its stop is no
"release down" alert; one still loading is not listed yet, so its start is none either.

Nothing is written until `monitor up` made the folder: deploys on a host without a monitor
pay one stat() for this.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..files import write_atomic
from ..host import engine_api
from ..host.labels import instance
from ..host.releases import Release
from ..release.state import home, read_pointers

READABLE = 0o644  # the monitor's files: Prometheus runs as another user than the one who writes them


def monitor_dir() -> Path:
    """The monitor's folder in the state directory, one per deploytool instance."""
    return home() / "monitor" / instance()


def targets_file() -> Path:
    return monitor_dir() / "targets" / "releases.json"


def serving(
    releases: list[Release], listed: set[tuple[str, int]] | frozenset = frozenset()
) -> dict[str, Release]:
    """Each slot's release to scrape: the pointer's current when it runs, else the newest running.

    A release joins once its health check passed, never while it loads: SGLang refuses
    connections for the minutes its weights load, and a target that cannot be scraped for a
    minute is a DeploytoolReleaseDown page, for a deploy deploytool is making. A release already
    `listed` (the file as it stands) stays while it runs, healthy or not: a serving release that
    fails still pages, under the rules as shipped."""
    by_slot: dict[str, list[Release]] = {}
    for release in releases:
        joined = (release.slot, release.release) in listed or release.health in ("healthy", None)
        if (release.running or release.state == "restarting") and joined:
            by_slot.setdefault(release.slot, []).append(release)
    out = {}
    for slot, running in by_slot.items():
        current = read_pointers(slot).current
        chosen = next((r for r in running if r.release == current), None)
        out[slot] = chosen or max(running, key=lambda r: r.release)
    return out


def target_groups(
    releases: list[Release], listed: set[tuple[str, int]] | frozenset = frozenset()
) -> list[dict[str, Any]]:
    groups = []
    for slot, release in sorted(serving(releases, listed).items()):
        address = release.url.removeprefix("http://").removeprefix("https://")
        groups.append(
            {
                "targets": [address],
                "labels": {
                    "slot": slot,
                    "release": str(release.release),
                    "profile": release.profile,
                    "card": ",".join(release.gpus) or "cpu",
                    "simulator": "true" if release.simulator else "false",
                    # whether the release wants a key on its API (never the key): its /metrics needs none
                    # (SGLang serves /metrics, /health and /ready open), so the scrape carries no key
                    "api_key": "required" if release.api_key else "none",
                },
            }
        )
    return groups


def listed_now(path: Path | None = None) -> set[tuple[str, int]]:
    """The (slot, release) pairs the targets file lists now (none when it is missing or unreadable)."""
    try:
        groups = json.loads((path or targets_file()).read_text())
        return {(g["labels"]["slot"], int(g["labels"]["release"])) for g in groups}
    except (OSError, ValueError, KeyError, TypeError):
        return set()


def write_targets(releases: list[Release] | None = None) -> Path:
    """Write the file from the engine's releases (read now when not given)."""
    if releases is None:
        releases = engine_api.read_releases()
        if releases is None:  # an engine only the SDK reaches
            from ..host.engine import Engine

            releases = Engine().releases()
    path = targets_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Prometheus reads it as its own user in its container: readable by others whatever the
    # umask (it names addresses and labels, no secret), or a cut-over written under umask 077
    # leaves Prometheus scraping the release it replaced
    write_atomic(path, json.dumps(target_groups(releases, listed_now(path)), indent=2) + "\n", mode=READABLE)
    return path


def monitored() -> bool:
    """Whether `monitor up` has set this instance's monitor up (its targets folder exists)."""
    return targets_file().parent.is_dir()


def write_if_monitored(releases: list[Release] | None = None) -> Path | None:
    """write_targets when the monitor is set up, else nothing."""
    if not monitored():
        return None
    return write_targets(releases)
