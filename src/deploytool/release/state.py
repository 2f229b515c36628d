"""deploytool's state directory (DEPLOYTOOL_HOME): each release's rendered files, the slot's
pointers (current, previous), an append-only journal of every action, and per-slot locks.

The engine's labels say what runs where; this directory remembers what the engine cannot:
which stopped release is the known-good rollback target, and what happened when.

    $DEPLOYTOOL_HOME/
      journal.jsonl                      every action, one JSON object a line, append-only
      slots/<slot>/slot.json             {"current": N, "previous": M, "next_release": K}
      slots/<slot>/lock                  held during up/rollback
      slots/<slot>/releases/<N>/         compose.yaml, release.json, qualify/ reports
      instances/<name>/slots/...         the same, for a DEPLOYTOOL_INSTANCE other than "default"
      cache/                             downloads (wheels, sglang sources), reusable
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import SlotBusy, UsageError
from ..files import write_atomic
from ..host.labels import instance
from ..redaction import scrub_all


def home() -> Path:
    root = os.environ.get("DEPLOYTOOL_HOME")
    path = (
        Path(root)
        if root
        else Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local/state")) / "deploytool"
    )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"state directory {path} cannot be created: {exc.strerror}",
            hint="set DEPLOYTOOL_HOME to a writable folder",
        ) from None
    return path


def cache_dir(*parts: str) -> Path:
    path = home().joinpath("cache", *parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def build_lock(tag: str) -> Iterator[None]:
    """Held while an image is checked and built: a second deploytool building the same tag
    (a user's two terminals, a test suite's workers) waits, then finds the image there,
    instead of building it again beside the first. Kept in the cache, which the deploytools
    that share downloads share."""
    from filelock import FileLock

    name = re.sub(r"[^A-Za-z0-9_.-]", "_", tag)
    with FileLock(str(cache_dir("build-locks") / f"{name}.lock")):
        yield


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# -- journal -------------------------------------------------------------------------------
def journal(event: str, **fields: Any) -> dict[str, Any]:
    """Append one action to the journal. O_APPEND writes of one line are atomic on Linux, so
    concurrent deploytools on different slots never interleave within a line."""
    entry = {"time": now_iso(), "event": event, "instance": instance(), **fields}
    line = json.dumps(scrub_all(entry), default=str) + "\n"  # no secret value this process holds
    fd = os.open(home() / "journal.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)  # the umask decides
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    return entry


def read_journal(slot: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
    path = home() / "journal.jsonl"
    if not path.exists():
        return []
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    entries = [e for e in entries if e.get("instance", "default") == instance()]
    if slot:
        entries = [e for e in entries if e.get("slot") == slot]
    return entries[-limit:] if limit else entries


# -- slots ---------------------------------------------------------------------------------
@dataclass
class SlotPointers:
    current: int | None = None
    previous: int | None = None
    next_release: int = 1


def slot_path(slot: str) -> Path:
    """Where a slot's state lives, without creating it (readers and `--dry-run` write nothing)."""
    # Another DEPLOYTOOL_INSTANCE on the same state directory keeps its own pointers and locks.
    base = home() if instance() == "default" else home() / "instances" / instance()
    return base / "slots" / slot


def release_path(slot: str, release: int) -> Path:
    return slot_path(slot) / "releases" / str(release)


def slot_dir(slot: str) -> Path:
    path = slot_path(slot)
    path.mkdir(parents=True, exist_ok=True)
    return path


def release_dir(slot: str, release: int) -> Path:
    path = release_path(slot, release)
    path.mkdir(parents=True, exist_ok=True)
    return path


def read_pointers(slot: str) -> SlotPointers:
    path = slot_path(slot) / "slot.json"
    if not path.exists():
        return SlotPointers()
    return SlotPointers(**json.loads(path.read_text()))


def write_pointers(slot: str, pointers: SlotPointers) -> None:
    write_atomic(slot_dir(slot) / "slot.json", json.dumps(asdict(pointers), indent=2) + "\n")


@contextmanager
def slot_lock(slot: str, action: str) -> Iterator[None]:
    """Hold the slot for one up/rollback; a second one is refused at once, naming the holder."""
    from filelock import FileLock, Timeout  # only the commands that act lock (status and --help do not)

    directory = slot_dir(slot)
    holder_file = directory / "lock.holder"
    lock = FileLock(str(directory / "lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        holder = holder_file.read_text().strip() if holder_file.exists() else "another deploytool"
        raise SlotBusy(
            f"slot {slot} is busy: {holder}",
            hint="wait for it to finish; one up/rollback runs per slot at a time",
        ) from None
    try:
        write_atomic(
            holder_file,
            f"`deploytool {action}` (pid {os.getpid()} on {socket.gethostname()}, since {now_iso()})\n",
        )
        yield
    finally:
        holder_file.unlink(missing_ok=True)
        lock.release()


def monotonic() -> float:
    return time.monotonic()
