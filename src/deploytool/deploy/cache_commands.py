"""`cache status` and `cache wipe`: a slot's kernel cache volume, read or emptied with its
newest release's image (the one that knows the cache's layout). A wipe holds the slot's lock
and refuses while a release of the slot runs: the server would be using the files it removes."""

from __future__ import annotations

from ..errors import DeploytoolError
from ..host.engine import Engine
from ..host.slots import Slot
from ..release import cache
from ..release.state import slot_lock


def slot_image(engine: Engine, slot_name: str) -> str:
    """The image of the slot's newest release."""
    releases = engine.releases(slot_name)
    if not releases:
        raise DeploytoolError(
            f"slot {slot_name} has no release, so no image to inspect its cache with",
            hint="`deploytool up` creates the slot",
        )
    return max(releases, key=lambda r: r.release).image


def cache_status(slot: Slot, *, engine: Engine | None = None) -> cache.CacheState:
    engine = engine or Engine()
    return cache.read_state(engine, slot_image(engine, slot.name), slot)


def wipe_cache(slot: Slot, *, engine: Engine | None = None) -> cache.CacheDecision:
    """Empty the slot's cache volume, under the slot's lock, while none of its releases runs."""
    engine = engine or Engine()
    with slot_lock(slot.name, "cache wipe"):
        running = [r for r in engine.releases(slot.name) if r.running]
        if running:
            raise DeploytoolError(
                f"release {running[0].release} of slot {slot.name} is running and using the cache",
                hint="wipe while the slot is stopped; `deploytool up` wipes a stale cache itself",
            )
        return cache.wipe_slot_cache(engine, slot_image(engine, slot.name), slot)
