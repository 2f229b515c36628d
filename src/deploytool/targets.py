"""What `qualify` and `bench` measure: an endpoint given by URL, or the release serving a slot.

`--url URL` needs no engine; `--cpu` / `--gpu UUID` find the running release of that slot by
its labels and use its published port, its profile and its image's labels.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .engine import Engine, Release
from .errors import UsageError
from .profiles import Profile, ProfileStore
from .slots import Slot, slot_from_options
from .state import read_pointers, release_path


@dataclass
class Target:
    url: str
    profile: Profile | None
    slot: Slot | None = None
    release: Release | None = None
    image_labels: dict[str, str] | None = None
    previous: Release | None = None  # the slot's previous release, for comparisons
    previous_results: Path | None = None  # that release's qualify results.json, when it has one

    def describe(self) -> str:
        if self.release is None:
            return self.url
        return f"{self.url} (slot {self.release.slot}, release {self.release.release}, profile {self.release.profile})"


def resolve_target(*, url: str | None, gpus: list[str] | None, cpu: bool, profile_name: str | None,
                   profiles_dirs: list[Path] | None = None) -> Target:
    store = ProfileStore(profiles_dirs)
    if url:
        if gpus or cpu:
            raise UsageError("give --url, or a slot (--cpu / --gpu UUID), not both")
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"--url {url!r} is not an http(s) URL")
        return Target(url=url.rstrip("/"), profile=store.get(profile_name) if profile_name else None)
    slot = slot_from_options(gpus, cpu)
    engine = Engine()
    releases = engine.releases(slot.name)
    serving = [r for r in releases if r.running]
    if not serving:
        raise UsageError(f"nothing is serving on slot {slot.name}",
                         hint="`deploytool status` shows the slots; `deploytool up` starts a release")
    current = max(serving, key=lambda r: r.release)
    profile = store.get(profile_name or current.profile)
    previous = previous_release(slot, releases, current.release)
    return Target(url=current.url, profile=profile, slot=slot, release=current,
                  image_labels=engine.image_labels(current.image), previous=previous,
                  previous_results=qualify_results_path(slot, previous.release) if previous else None)


def previous_release(slot: Slot, releases: list[Release], current: int) -> Release | None:
    """The slot's known-good rollback target from the state pointers, else the newest older
    release the engine still has."""
    pointers = read_pointers(slot.name)
    by_number = {r.release: r for r in releases}
    if pointers.current == current and pointers.previous in by_number:
        return by_number[pointers.previous]
    older = [r for r in releases if r.release < current]
    return max(older, key=lambda r: r.release) if older else None


def qualify_results_path(slot: Slot, release: int) -> Path | None:
    path = release_path(slot.name, release) / "qualify" / "results.json"
    return path if path.exists() else None
