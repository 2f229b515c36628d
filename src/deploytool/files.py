"""Files deploytool writes: atomically, and as JSON from its typed objects.

Standard library only: the state directory (deploy, journal, pointers) and the CLI's --json
use these, and neither must pay for pandas or jinja2 at start-up.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import Any

from .redaction import scrub, scrub_all


def to_jsonable(obj: Any) -> Any:
    if is_dataclass(obj) and not isinstance(obj, type):
        return to_jsonable(asdict(obj))
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float) and obj != obj:  # NaN is not JSON
        return None
    return obj


def umask() -> int:
    """The process's umask (read from /proc where it can be, without changing it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    current = os.umask(0o022)  # set and put back at once: the only portable way to read it
    os.umask(current)
    return current


def write_atomic(path: Path, text: str | bytes, *, private: bool = False, mode: int | None = None) -> Path:
    """Write via a temporary file and rename, so a reader never sees half a report. Text passes
    through the secret scrubber (deploytool.redaction): no value this process holds is written.
    The file follows the umask, like any file a program creates; `private`: 0600 whatever the
    umask (a file that names where a secret lives); `mode`: that mode whatever the umask (a file
    another user must read, such as Prometheus's in its container)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    if isinstance(text, bytes):
        with os.fdopen(fd, "wb") as binary:
            binary.write(text)
    else:
        # A lone surrogate (from a YAML "\\udce2" escape, or text the wire let through) cannot be
        # encoded: it is written as its escape, never as a raw byte, and never ends the command.
        with os.fdopen(fd, "w", errors="backslashreplace") as handle:
            handle.write(scrub(text))
    # mkstemp makes 0600 whatever the umask; the mode is set before the rename, so no reader
    # ever meets the file with another one
    os.chmod(tmp, 0o600 if private else mode if mode is not None else 0o666 & ~umask())
    os.replace(tmp, path)
    return path


def write_json(path: Path, obj: Any, *, private: bool = False) -> Path:
    return write_atomic(path, json.dumps(scrub_all(to_jsonable(obj)), indent=2) + "\n", private=private)


# -- files deploytool runs or reads secrets from: whose they are ---------------------------------
@dataclass(frozen=True)
class Untrusted:
    """Why a file or folder cannot be trusted: the one at fault, what is wrong, the command that fixes it."""

    path: Path
    reason: str
    fix: str


def user_name(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (KeyError, ImportError):
        return str(uid)


def _writers(mode: int) -> str:
    return {0o022: "group and others", 0o020: "group", 0o002: "others"}[mode & 0o022]


MAX_LINKS = 40  # as the kernel: a chain longer than this (or a loop) resolves to nothing


@dataclass(frozen=True)
class Resolution:
    """How a path resolves: the folders looked into on the way (each holding a name that was
    followed: each link's own folder and the folders above it), the links followed, the final
    target, and whether that target exists."""

    looked_in: list[Path]
    links: list[Path]
    target: Path
    exists: bool


def resolve_links(path: Path) -> Resolution:
    """Resolve `path` as the kernel does, name by name and link by link. Whoever may write any
    folder on the way may swap a name in it, so the whole chain is what a trust check must see."""
    looked_in: list[Path] = []
    links: list[Path] = []
    current = Path("/")
    pending = list(Path(os.path.abspath(path)).parts[1:])
    while pending:
        name = pending.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            current = current.parent  # `current` holds no link, so its parent is the real one
            continue
        if current not in looked_in:
            looked_in.append(current)
        step = current / name
        if not os.path.lexists(step):
            return Resolution(looked_in, links, Path(os.path.join(current, name, *pending)), False)
        if not os.path.islink(step):
            current = step
            continue
        links.append(step)
        if len(links) > MAX_LINKS:
            return Resolution(looked_in, links, step, False)
        link = os.readlink(step)
        if os.path.isabs(link):
            current = Path("/")
        pending = [*Path(link).parts[1 if os.path.isabs(link) else 0 :], *pending]
    return Resolution(looked_in, links, current, True)


def untrusted(path: Path, *, folders_above: bool = True) -> Untrusted | None:
    """The first reason `path` is not the invoking user's own, or None. Owned by the invoking
    user or root and writable by no one else: the file (a link's final target, which is what
    runs), and with `folders_above` every folder the path resolves through, link by link (each
    link's own folder and those above it, then the target's), since whoever may write a folder may
    rename what is in it and put their own file or link there. A folder that all may write keeps
    its entries to their owners only with the sticky bit (/tmp). A link that leads nowhere is
    refused too: whoever may create its target later (in /tmp, anyone) would choose what runs."""
    import stat

    me = os.geteuid()
    chain = resolve_links(path)
    checks: list[tuple[Path, bool]] = [(folder, True) for folder in chain.looked_in] if folders_above else []
    # a link cannot be changed in place, but in a folder with the sticky bit its owner may still
    # replace it: a link on the way is held to the owner rule as well
    checks += [(link, False) for link in chain.links if folders_above]
    for place, above in [*checks, (chain.target, False)]:
        if place == chain.target and not chain.exists:
            return Untrusted(
                place,
                "does not exist (a dangling link, or a chain of more than "
                f"{MAX_LINKS} links): whoever creates it later chooses what runs",
                f"rm {path}, or point it at a file of your own",
            )
        info = place.lstat()  # a folder on the way or the target holds no link; a link is judged as itself
        if info.st_uid not in (me, 0):
            return Untrusted(
                place,
                f"is owned by {user_name(info.st_uid)} (uid {info.st_uid}), not by you "
                f"({user_name(me)}){' or root' if me else ''}: its owner can change it",
                f"chown {user_name(me)} {place}",
            )
        sticky = above and stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_ISVTX
        if (
            info.st_mode & 0o022 and not sticky and not stat.S_ISLNK(info.st_mode)
        ):  # a link's mode means nothing
            return Untrusted(
                place,
                f"is writable by {_writers(info.st_mode)} (mode {info.st_mode & 0o7777:04o}): "
                "whoever can write it can change it",
                f"chmod go-w {place}",
            )
    return None
