"""`image.wheels`: wheel files of your own (an sglang-kernel or FlashInfer built for your card)
that the image installs instead of the index's package of the same name.

Each is pinned by sha256 in the profile; a file whose bytes changed since is refused before
anything is built (and the image tag follows the pins, not the paths). In the image:

  * requirements.txt (an unlocked image): the package's line becomes the file's path;
  * requirements.lock (a locked image): the package's line becomes the file's name, version
    and sha256, so pip's --require-hashes checks it again; the index's twin is not fetched;
  * the labels: dev.deploytool.local-wheels names each file, its version and sha256.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import ProfileError
from ..profiles import Profile
from ..profiles.image_source import local_path
from .wheelhouse import WHEEL_FILE, Lock, LockedWheel, file_sha256
from .wheelhouse import normal_name as normal

IN_IMAGE = "/tmp/deploytool/local-wheels"  # nosec B108: a path inside the image being built, not the host's /tmp; where the build context's local-wheels/ is copied
_HASHES: dict[tuple[str, int, int], str] = {}  # (path, size, mtime) -> sha256, for one process


@dataclass(frozen=True)
class LocalWheel:
    name: str  # normalised: lower case, '-' for runs of '-', '_', '.'
    version: str
    path: Path
    sha256: str

    @property
    def filename(self) -> str:
        return self.path.name

    def record(self) -> dict[str, str]:
        return {"name": self.name, "version": self.version, "file": self.filename, "sha256": self.sha256}


def requirement_name(line: str) -> str:
    """The distribution a requirements line installs ('torch==2.14.1' -> 'torch')."""
    return normal(re.split(r"[\s=<>!~;\[@]", line.strip(), maxsplit=1)[0])


def resolve(profile: Profile) -> list[LocalWheel]:
    """The profile's wheels, each checked: a wheel file name, made for the image's Python and
    this machine's architecture, present, and with the pinned sha256."""
    out: dict[str, LocalWheel] = {}
    for index, spec in enumerate(profile.image.wheels):
        where = f"profile {profile.name!r} ({profile.source or 'no file'}): image.wheels[{index}]"
        path = local_path(profile.source, spec.file)
        match = WHEEL_FILE.match(path.name)
        if not match:
            raise ProfileError(
                f"{where}: {path.name} is not a wheel file name",
                hint="NAME-VERSION[-BUILD]-PYTHON-ABI-PLATFORM.whl, as pip wheel writes it",
            )
        problem = _incompatible(match, profile.image.python)
        if problem:
            raise ProfileError(f"{where}: {path.name} {problem}")
        if not path.is_file():
            raise ProfileError(f"{where}: {path} does not exist")
        actual = _sha256(path)
        if actual != spec.sha256:
            raise ProfileError(
                f"{where}: {path} has sha256 {actual}, the profile pins {spec.sha256}: the file "
                "changed since it was pinned, so it is not the wheel the profile names",
                hint="put the pinned file back; if you rebuilt it on purpose, pin its new sha256 "
                "(`sha256sum FILE`)",
            )
        wheel = LocalWheel(normal(match["name"]), match["version"], path, actual)
        if wheel.name in out:
            raise ProfileError(
                f"{where}: a second wheel of {wheel.name} ({out[wheel.name].filename} is the first)"
            )
        out[wheel.name] = wheel
    return list(out.values())


def _incompatible(match: re.Match, python: str) -> str | None:
    cp = "cp" + python.replace(".", "")
    tags = match["python"].split(".")
    abi = match["abi"].split(".")
    fits_python = any(t in (cp, "py3", f"py{python.replace('.', '')}") for t in tags) or (
        "abi3" in abi and any(t.startswith("cp3") and int(t[3:] or 0) <= int(cp[3:]) for t in tags)
    )
    if not fits_python:
        return f"is built for {match['python']}/{match['abi']}, the image's Python is {python}"
    arch = {"arm64": "aarch64"}.get(platform.machine(), platform.machine())
    plats = match["platform"].split(".")
    if not any(
        p == "any" or (p.startswith(("manylinux", "linux", "musllinux")) and p.endswith(arch)) for p in plats
    ):
        return f"is built for {match['platform']}, the image is linux {arch}"
    return None


def _sha256(path: Path) -> str:
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _HASHES:
        _HASHES[key] = file_sha256(path)
    return _HASHES[key]


def replace_requirements(requirements: list[str], wheels: list[LocalWheel]) -> list[str]:
    """Each wheel's path in place of the line of its package (appended when there is none)."""
    by_name = {w.name: w for w in wheels}
    out = [
        f"{IN_IMAGE}/{by_name.pop(requirement_name(r)).filename}" if requirement_name(r) in by_name else r
        for r in requirements
    ]
    return out + [f"{IN_IMAGE}/{w.filename}" for w in by_name.values()]


def replace_in_lock(lock: Lock, wheels: list[LocalWheel], *, drop: tuple[str, ...] = ()) -> tuple[str, Lock]:
    """(the lock the image installs, the lock of the index's wheels still to fetch): the local
    wheels in place of their twins, and the packages in `drop` (a fork's sglang) left out."""
    local = {w.name: w for w in wheels}
    kept = tuple(w for w in lock.wheels if normal(w.name) not in local and normal(w.name) not in drop)
    mine = [LockedWheel(w.name, w.version, w.filename, w.sha256) for w in wheels]
    header = [line for line in lock.path.read_text().splitlines() if line.startswith("#")]
    header.append(
        f"# In this image: {lock.path.name}"
        + (f" without {', '.join(drop)} (built from source)" if drop else "")
        + (f"; local wheels in place of the index's {', '.join(local)}" if local else "")
        + "."
    )
    lines = sorted(
        [w.line() for w in kept] + [w.line() for w in mine], key=lambda x: normal(x.split("==")[0])
    )
    return "\n".join(header + lines) + "\n", Lock(lock.path, kept, lock.requirements)


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def label(wheels: list[LocalWheel]) -> str:
    return json.dumps([w.record() for w in wheels], sort_keys=True)
