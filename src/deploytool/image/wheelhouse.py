"""Hash-locked wheelhouses: every wheel an image installs, pinned by name, version and sha256.

A lock file (images/locks/*.lock) is a pip requirements file, one wheel a line:

    torch==2.14.1 --hash=sha256:<64 hex>  # torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl

so the image installs it with `pip install --require-hashes --no-index --find-links`, and pip
itself refuses a wheel whose bytes changed. deploytool checks the wheelhouse against the lock
before a build starts, so that a changed or missing wheel is named at once, not after the
engine has unpacked gigabytes.

`resolve()` asks pip's own resolver (a dry run with `--report`, for the image's Python and
platform, not this machine's) which wheels a set of requirements needs; `fill()` downloads
exactly the locked files (`pip download --require-hashes`). Both need a package index; a
build from a filled wheelhouse needs none.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import BuildError, UsageError

# The target platform: the images are Debian bookworm (glibc 2.36) or Ubuntu 24.04 (2.39);
# manylinux tags up to 2_34 install on both, newest first so pip prefers them.
MANYLINUX_MAX = 34
_LINE = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+)\s+--hash=sha256:(?P<sha>[0-9a-f]{64})"
    r"\s*#\s*(?P<file>\S+\.whl)\s*$"
)


@dataclass(frozen=True)
class LockedWheel:
    name: str
    version: str
    filename: str
    sha256: str

    def line(self) -> str:
        return f"{self.name}=={self.version} --hash=sha256:{self.sha256}  # {self.filename}"


@dataclass(frozen=True)
class Lock:
    path: Path
    wheels: tuple[LockedWheel, ...]
    requirements: tuple[str, ...]  # what was resolved (the header says it too)

    @property
    def digest(self) -> str:
        """sha256 of the lock's content: one value standing for every wheel in it."""
        return hashlib.sha256(self.path.read_bytes()).hexdigest()

    def version_of(self, name: str) -> str | None:
        want = normal_name(name)
        return next((w.version for w in self.wheels if normal_name(w.name) == want), None)


def normal_name(name: str) -> str:
    """A distribution's name as pip compares it: lower case, '-' for every run of '-', '_', '.'."""
    return re.sub(r"[-_.]+", "-", name).lower()


# A wheel's file name: NAME-VERSION[-BUILD]-PYTHON-ABI-PLATFORM.whl (the wheel spec's fields).
WHEEL_FILE = re.compile(
    r"^(?P<name>[A-Za-z0-9_.]+?)-(?P<version>[^-]+)(?:-\d[^-]*)?-(?P<python>[^-]+)"
    r"-(?P<abi>[^-]+)-(?P<platform>[^-]+)\.whl$"
)


def wheel_name_version(filename: str) -> tuple[str, str] | None:
    """(normalised name, version) of a wheel file name, or None for what is not one."""
    match = WHEEL_FILE.match(filename)
    return (normal_name(match["name"]), match["version"]) if match else None


def platform_args(python: str, arch: str = "x86_64") -> list[str]:
    tags = [f"manylinux_2_{n}_{arch}" for n in range(MANYLINUX_MAX, 16, -1)]
    tags += [f"manylinux2014_{arch}", f"manylinux2010_{arch}", f"manylinux1_{arch}"]
    return [
        "--only-binary=:all:",
        "--python-version",
        python,
        "--implementation",
        "cp",
        *(a for t in tags for a in ("--platform", t)),
    ]


def resolve(requirements: list[str], *, python: str, arch: str = "x86_64") -> list[LockedWheel]:
    """The wheels pip would install for `requirements` on the image's Python and platform, with
    the sha256 the index publishes for each (pip's installation report)."""
    with tempfile.TemporaryDirectory(prefix="deploytool-lock-") as tmp:
        report = Path(tmp) / "report.json"
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--quiet",
            "--ignore-installed",
            "--report",
            str(report),
            "--target",
            str(Path(tmp) / "target"),
            *platform_args(python, arch),
            *requirements,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            errors = [x for x in proc.stderr.splitlines() if "is ignored" not in x]
            raise UsageError(
                "pip could not resolve "
                + " ".join(requirements)
                + ":\n"
                + "\n".join("    " + x for x in errors[-12:]),
                hint="a lock is made where a package index is reachable",
            )
        data = json.loads(report.read_text())
    wheels = []
    for item in data.get("install", []):
        info = item["download_info"]
        filename = info["url"].rsplit("/", 1)[-1]
        hashes = (info.get("archive_info") or {}).get("hashes") or {}
        sha = hashes.get("sha256")
        if not filename.endswith(".whl") or not sha:
            raise UsageError(f"pip resolved {filename} without a wheel sha256; a lock needs both")
        wheels.append(LockedWheel(item["metadata"]["name"], item["metadata"]["version"], filename, sha))
    return sorted(wheels, key=lambda w: normal_name(w.name))


def write_lock(
    path: Path,
    wheels: list[LockedWheel],
    *,
    title: str,
    requirements: list[str],
    python: str,
    arch: str,
    made_by: str,
) -> Lock:
    header = [
        f"# deploytool wheel lock: {title}",
        f"# Python {python}, manylinux (glibc <= 2.{MANYLINUX_MAX}) {arch}; {len(wheels)} wheels.",
        f"# Made by `{made_by}` (pip's resolver, the index's sha256); do not edit by hand.",
        "# Installed with: pip install --require-hashes --no-index --find-links WHEELHOUSE -r THIS",
        "# requirements: " + " ".join(requirements),
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(header + [w.line() for w in wheels]) + "\n")
    return read_lock(path)


def read_lock(path: Path) -> Lock:
    if not path.is_file():
        raise UsageError(
            f"wheel lock {path} does not exist",
            hint="make it where an index is reachable: deploytool build --lock --profile NAME",
        )
    wheels: list[LockedWheel] = []
    requirements: tuple[str, ...] = ()
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if line.startswith("# requirements:"):
            requirements = tuple(line.split(":", 1)[1].split())
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if not match:
            raise UsageError(
                f"{path}:{number}: not a lock line: {line[:80]!r}",
                hint="expected NAME==VERSION --hash=sha256:HEX  # FILE.whl",
            )
        wheels.append(LockedWheel(match["name"], match["version"], match["file"], match["sha"]))
    return Lock(path, tuple(wheels), requirements)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(lock: Lock, wheelhouse: Path) -> list[Path]:
    """The wheelhouse's files for every locked wheel, each checked against its sha256. A missing
    or changed wheel fails here, named, before the engine is asked for anything."""
    missing, changed, found = [], [], []
    for wheel in lock.wheels:
        path = wheelhouse / wheel.filename
        if not path.is_file():
            missing.append(wheel.filename)
            continue
        actual = file_sha256(path)
        if actual != wheel.sha256:
            changed.append(f"{wheel.filename}: sha256 {actual}, the lock says {wheel.sha256}")
        found.append(path)
    if changed:
        raise BuildError(
            f"wheelhouse {wheelhouse} does not match the lock {lock.path.name}; changed wheel"
            f"{'s' if len(changed) > 1 else ''}:\n" + "\n".join("    " + x for x in changed),
            hint="restore the wheel (deploytool fills a wheelhouse from the lock when an index is "
            "reachable), or re-lock on purpose: deploytool build --lock",
        )
    if missing:
        raise BuildError(
            f"wheelhouse {wheelhouse} lacks {len(missing)} wheel(s) of the lock {lock.path.name}: "
            + ", ".join(missing[:8])
            + (" ..." if len(missing) > 8 else ""),
            hint="fill it where an index is reachable (deploytool build fills its cache "
            "wheelhouse itself), or copy the files there",
        )
    return found


def fill(lock: Lock, wheelhouse: Path, *, python: str, arch: str = "x86_64") -> Path:
    """Download every locked wheel that is not in the wheelhouse yet (pip checks each hash)."""
    wheelhouse.mkdir(parents=True, exist_ok=True)
    todo = [w for w in lock.wheels if not (wheelhouse / w.filename).is_file()]
    if todo:
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as req:
            req.write("\n".join(w.line() for w in todo) + "\n")
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--require-hashes",
            "--progress-bar",
            "off",
            "--dest",
            str(wheelhouse),
            *platform_args(python, arch),
            "-r",
            req.name,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        Path(req.name).unlink()
        if proc.returncode != 0:
            errors = [x for x in proc.stderr.splitlines() if "is ignored" not in x]
            raise UsageError(
                f"could not fill {wheelhouse} from {lock.path.name}:\n"
                + "\n".join("    " + x for x in errors[-12:])
            )
    verify(lock, wheelhouse)
    return wheelhouse
