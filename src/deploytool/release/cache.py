"""The JIT kernel cache of a slot: a named volume mounted at /cache, and the fingerprint of
what compiled its contents.

FlashInfer keys its cache by its own version and the GPU architecture, not by the compiler,
so a new CUDA toolkit would otherwise reuse kernels built by the old one. Before a release
starts, `prepare_slot_cache` compares the new image's toolchain fingerprint (its labels) and
the slot's cards (architecture, driver) with the fingerprint stored in the volume, and wipes
the whole cache when anything differs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..errors import DeployError, DeploytoolError
from ..host import labels
from ..host.engine import Engine
from ..host.gpus import read_inventory
from ..host.slots import Slot
from .state import cache_dir, journal

FINGERPRINT_FILE = ".deploytool-fingerprint.json"
# Keys that say nothing about compiled kernels: a new deploytool alone keeps the cache.
_IGNORED_KEYS = {"deploytool"}


@dataclass
class CacheState:
    volume: str
    exists: bool
    fingerprint: dict[str, Any] | None
    files: int
    bytes: int


@dataclass
class CacheDecision:
    volume: str
    action: Literal["created", "kept", "wiped"]
    reason: str
    differences: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> {stored, new}
    files_removed: int = 0


def slot_hardware(slot: Slot) -> dict[str, Any]:
    """What of the slot's cards a compiled kernel depends on."""
    if slot.is_cpu:
        return {"gpu_arch": "cpu"}
    inventory = read_inventory()
    cards = [inventory.by_uuid(uuid) for uuid in slot.gpus]
    return {
        "gpu_arch": ",".join(sorted({c.compute_capability or "unknown" for c in cards if c})) or "unknown",
        "driver": inventory.driver_version or "unknown",
    }


TOOLCHAIN_FILE = "/opt/deploytool/toolchain.json"  # written at build time by images/sglang/toolchain.py


def expected_fingerprint(engine: Engine, image: str, slot: Slot) -> dict[str, Any]:
    """The image's declared toolchain (its label), corrected by what its build found installed
    (nvcc, ptxas, gcc, package versions), plus the slot's cards."""
    return _expected(engine, image, slot, installed_toolchain(engine, image))


def _expected(engine: Engine, image: str, slot: Slot, installed: dict[str, Any]) -> dict[str, Any]:
    raw = engine.image_labels(image).get(labels.IMAGE_FINGERPRINT)
    declared = json.loads(raw) if raw else {}
    fingerprint = {k: v for k, v in declared.items() if k not in _IGNORED_KEYS}
    fingerprint.update({k: v for k, v in installed.items() if k != "patches" and isinstance(v, str)})
    fingerprint.update(slot_hardware(slot))
    return fingerprint


# The toolchain record of every image this process has read, by image id, and on disk for the
# next deploytool (the cache's toolchains/ folder). An image's files never change under its id (the
# digest of its configuration, which names every layer's content), and each read is a container
# started, waited on and removed: about 0.15 s of the machine's CPU in the container and as much
# again in the engine. An up reads the record in its plan and in the cache step before the start,
# a rollout once more for each slot, and every later up of the same image again.
_TOOLCHAINS: dict[str, dict[str, Any]] = {}
_TOOLCHAIN_SCRIPT = f"cat {TOOLCHAIN_FILE} 2>/dev/null || echo '{{}}'"
_IMAGE_ID = re.compile(r"sha256:[0-9a-f]{64}")


def _image_id(engine: Engine, image: str) -> str | None:
    found = engine.image(image)
    return getattr(found, "id", None)


# The records live under a folder named by how they were read: a deploytool that reads another
# file or another way never takes an older one's record for its own.
_RECORDS = ("toolchains", hashlib.sha256(_TOOLCHAIN_SCRIPT.encode()).hexdigest()[:12])


def _record_file(image_id: str | None) -> Path | None:
    if image_id is None or not _IMAGE_ID.fullmatch(image_id):
        return None  # only a content digest names the same files for good
    try:
        return cache_dir(*_RECORDS) / f"{image_id.removeprefix('sha256:')}.json"
    except (OSError, DeploytoolError):  # no cache folder to keep it in: read each time, as before
        return None


def _known(image_id: str | None) -> dict[str, Any] | None:
    """The image's record from this process's reads or an earlier deploytool's, else None."""
    if image_id is None:
        return None
    if image_id in _TOOLCHAINS:
        return dict(_TOOLCHAINS[image_id])
    path = _record_file(image_id)
    try:
        data = json.loads(path.read_text()) if path is not None else None
    except (OSError, ValueError):  # not written yet, or cut short: read from the image again
        return None
    if not isinstance(data, dict):
        return None
    _TOOLCHAINS[image_id] = data
    return dict(data)


def installed_toolchain(engine: Engine, image: str) -> dict[str, Any]:
    """The image's record of its installed toolchain; {} for an image without one (sim).

    A container that could not read it is an error, not {}: the declared toolchain in its
    place would keep or wipe the cache on a fingerprint the image does not have."""
    return _installed(engine, image, _image_id(engine, image))


def _installed(engine: Engine, image: str, image_id: str | None) -> dict[str, Any]:
    known = _known(image_id)
    if known is not None:
        return known
    try:
        out = engine.run_throwaway(image, _TOOLCHAIN_SCRIPT, root=True)
    except DeployError as exc:
        raise DeployError(
            f"could not read the toolchain record {TOOLCHAIN_FILE} of {image}: {exc.message}"
        ) from None
    return _remember(image_id, out)


def _remember(image_id: str | None, out: str) -> dict[str, Any]:
    try:
        data = json.loads(out)
    except ValueError:
        data = {}  # not a record deploytool wrote
    data = data if isinstance(data, dict) else {}
    if image_id is not None:
        _TOOLCHAINS[image_id] = data
        path = _record_file(image_id)
        if path is not None:
            _keep(path, data)
    return dict(data)


def _keep(path: Path, data: dict[str, Any]) -> None:
    """Written whole under a name of its own, then renamed: a reader never finds half a record,
    and two writers (a rollout's slots in threads, two deploytools) never share a file. A full or
    read-only cache costs a container next time, nothing more."""
    try:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError:
        return
    partial = Path(name)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps(data, sort_keys=True))
        partial.replace(path)
    except OSError:
        with contextlib.suppress(OSError):
            partial.unlink()


def ensure_volume(engine: Engine, slot: Slot) -> bool:
    """Create the slot's cache volume when missing; True when it was created."""
    if engine.volume_exists(slot.cache_volume()):
        return False
    engine.create_volume(
        slot.cache_volume(),
        {labels.VOLUME_CACHE: slot.name, labels.MANAGED: "true", labels.INSTANCE: labels.instance()},
    )
    return True


def _in_volume(engine: Engine, image: str, slot: Slot, script: str) -> str:
    """Run a shell script with the cache volume at /cache, in a throwaway container of the
    release's own image (it is on the engine already; no helper image to pull)."""
    try:
        return engine.run_throwaway(image, script, volume=slot.cache_volume(), mount="/cache", root=True)
    except DeployError as exc:
        raise DeployError(
            f"could not read the JIT cache volume {slot.cache_volume()}: {exc.message}"
        ) from None


_STATE_SCRIPT = (
    f"cat /cache/{FINGERPRINT_FILE} 2>/dev/null || echo null; echo; "
    f"find /cache -mindepth 1 -type f ! -name {FINGERPRINT_FILE} | wc -l; "
    "du -sb /cache | cut -f1"
)
# Between the toolchain record and the volume's answer where one container reads both: a line
# no JSON record holds.
_BETWEEN = "--- deploytool: the cache volume ---"


def read_state(engine: Engine, image: str, slot: Slot) -> CacheState:
    if not engine.volume_exists(slot.cache_volume()):
        return CacheState(slot.cache_volume(), False, None, 0, 0)
    return _state_from(slot, _in_volume(engine, image, slot, _STATE_SCRIPT))


def state_and_expected(engine: Engine, image: str, slot: Slot) -> tuple[CacheState, dict[str, Any]]:
    """read_state and expected_fingerprint of the same image, from one throwaway container where
    both need one (the volume exists and this process has not read the image's toolchain yet)."""
    image_id = _image_id(engine, image)
    if _known(image_id) is not None or not engine.volume_exists(slot.cache_volume()):
        expected = _expected(engine, image, slot, _installed(engine, image, image_id))
        return read_state(engine, image, slot), expected
    out = _in_volume(
        engine, image, slot, f"{_TOOLCHAIN_SCRIPT}; printf '\\n%s\\n' '{_BETWEEN}'; {_STATE_SCRIPT}"
    )
    record, between, state = out.partition(f"\n{_BETWEEN}\n")
    if not between:
        raise DeployError(
            f"could not read the JIT cache volume {slot.cache_volume()}: expected the toolchain record "
            f"of {image}, then the volume's fingerprint, file count and size, got {out[-300:]!r}"
        )
    return _state_from(slot, state), _expected(engine, image, slot, _remember(image_id, record))


def _state_from(slot: Slot, out: str) -> CacheState:
    # rstrip only: an empty fingerprint file leaves a first line that is empty, and is wiped as unreadable
    parts = out.rstrip().rsplit("\n", 2)
    if len(parts) != 3 or not (parts[1].strip().isdigit() and parts[2].strip().isdigit()):
        raise DeployError(
            f"could not read the JIT cache volume {slot.cache_volume()}: expected its fingerprint, "
            f"file count and size, got {out[-300:]!r}"
        )
    fingerprint_text, files, size = parts
    try:
        fingerprint = json.loads(fingerprint_text)
    except json.JSONDecodeError:
        fingerprint = {"unreadable": fingerprint_text[:200]}
    return CacheState(slot.cache_volume(), True, fingerprint, int(files), int(size))


def _wipe(engine: Engine, image: str, slot: Slot, new_fingerprint: dict[str, Any] | None) -> int:
    write = ""
    if new_fingerprint is not None:
        payload = json.dumps(new_fingerprint, sort_keys=True).replace("'", "'\\''")
        write = f" && printf '%s\\n' '{payload}' > /cache/{FINGERPRINT_FILE}"
    out = _in_volume(
        engine,
        image,
        slot,
        f"n=$(find /cache -mindepth 1 -type f | wc -l); find /cache -mindepth 1 -delete{write} && echo $n",
    )
    last = out.strip().splitlines()[-1:] or [""]
    if not last[0].isdigit():
        raise DeployError(
            f"could not wipe the JIT cache volume {slot.cache_volume()}: expected the number of "
            f"files removed, got {out[-300:]!r}"
        )
    return int(last[0])


def decide(state: CacheState, expected: dict[str, Any]) -> CacheDecision:
    """Keep, wipe or create: a pure decision from what the volume holds and what the new
    release's image and cards would compile with. `up --dry-run` prints it; `prepare` applies it."""
    stored = state.fingerprint
    if not state.exists or (stored is None and state.files == 0):
        return CacheDecision(state.volume, "created", "new cache, fingerprint recorded")
    if stored == expected:
        return CacheDecision(state.volume, "kept", "the toolchain and the cards are unchanged")
    differences = {
        key: {"stored": (stored or {}).get(key), "new": expected.get(key)}
        for key in sorted(set(stored or {}) | set(expected))
        if (stored or {}).get(key) != expected.get(key)
    }
    what = ", ".join(differences) if stored else "no fingerprint recorded for its contents"
    return CacheDecision(state.volume, "wiped", f"toolchain or cards changed: {what}", differences)


def prepare_slot_cache(
    engine: Engine, image: str, slot: Slot, *, release: int | None = None
) -> CacheDecision:
    """Called before a release's container starts (a new one, or a restored one)."""
    if ensure_volume(engine, slot):
        # made just now, so nothing compiled into it: created, without a container to say so. (Files
        # the image holds at the mount point, copied into a new volume at its first mount, go
        # with the wipe that records the fingerprint.)
        state = CacheState(slot.cache_volume(), True, None, 0, 0)
        expected = expected_fingerprint(engine, image, slot)
    else:
        state, expected = state_and_expected(engine, image, slot)
    decision = decide(state, expected)
    if decision.action != "kept":
        decision.files_removed = _wipe(engine, image, slot, expected)
    journal(
        "cache." + decision.action,
        slot=slot.name,
        release=release,
        volume=decision.volume,
        reason=decision.reason,
        differences=decision.differences,
        files_removed=decision.files_removed,
    )
    return decision


def wipe_slot_cache(engine: Engine, image: str, slot: Slot) -> CacheDecision:
    """`deploytool cache wipe`: empty the volume; the next `up` records a new fingerprint."""
    ensure_volume(engine, slot)
    removed = _wipe(engine, image, slot, None)
    journal(
        "cache.wiped",
        slot=slot.name,
        volume=slot.cache_volume(),
        reason="deploytool cache wipe",
        files_removed=removed,
    )
    return CacheDecision(slot.cache_volume(), "wiped", "wiped on request", files_removed=removed)
