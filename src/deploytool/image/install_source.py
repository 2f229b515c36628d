"""Where pip takes an image's packages from: the profile's wheel lock (as it is, or with local
wheels and a fork's sglang taken out), a wheelhouse folder (`build --wheelhouse DIR`), or the
index; and what each adds to the build context. The sglang recipe declares its image with it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import FieldSentenceError
from ..profiles import Profile
from . import cudabase, local_wheels, runtime_source
from .wheelhouse import Lock, normal_name, wheel_name_version


@dataclass
class InstallSource:
    """Where pip takes the image's packages from, and what that adds to the context."""

    pip_source: str = ""  # pip's arguments; empty: the index
    wheel_versions: dict[str, str] = field(default_factory=dict)  # normalised name -> version installed
    lock_digest: str | None = None  # what stands for the venv lock in the tag
    files: dict[str, Path | str] = field(default_factory=dict)
    fetched: dict[str, Callable] = field(default_factory=dict)


def install_source(
    profile: Profile,
    *,
    lock: Lock | None,
    own: list[local_wheels.LocalWheel],
    source: runtime_source.ResolvedSource,
    wheelhouse: Path | None,
) -> InstallSource:
    """A lock (as it is, or with local wheels and a fork's sglang taken out), a wheelhouse, or
    the index. The locks stand for their wheels in the tag: each lock file is a declared input,
    and the wheels it names are only fetched (checked against it) when the image is built, so
    `render` of a locked profile reads two small files and stages nothing."""
    if lock is not None and (own or source.is_fork):
        out = _from_changed_lock(profile, lock, own, source, wheelhouse)
    elif lock is not None:
        out = InstallSource(
            pip_source="--no-index --find-links /tmp/deploytool/wheels --require-hashes",
            wheel_versions={normal_name(w.name): w.version for w in lock.wheels},
            lock_digest=lock.digest,
            files={"requirements.lock": lock.path},
            fetched={"wheels": cudabase.fetch_locked(lock, wheelhouse, python=profile.image.python)},
        )
    elif wheelhouse is not None:
        out = _from_wheelhouse(profile, own, source, wheelhouse)
    else:
        out = InstallSource()
    out.wheel_versions.update({w.name: w.version for w in own})
    return out


def _from_changed_lock(
    profile: Profile,
    lock: Lock,
    own: list[local_wheels.LocalWheel],
    source: runtime_source.ResolvedSource,
    wheelhouse: Path | None,
) -> InstallSource:
    """The lock with the local wheels in place of their twins (and a fork's sglang left out);
    only the index's wheels left are fetched."""
    text, index_lock = local_wheels.replace_in_lock(lock, own, drop=("sglang",) if source.is_fork else ())
    return InstallSource(
        pip_source=(
            "--no-index --find-links /tmp/deploytool/wheels"
            + (" --find-links /tmp/deploytool/local-wheels" if own else "")
            + " --require-hashes"
        ),
        wheel_versions={normal_name(w.name): w.version for w in index_lock.wheels},
        lock_digest=local_wheels.text_digest(text),
        files={"requirements.lock": text},
        fetched={"wheels": cudabase.fetch_locked(index_lock, wheelhouse, python=profile.image.python)},
    )


def _from_wheelhouse(
    profile: Profile,
    own: list[local_wheels.LocalWheel],
    source: runtime_source.ResolvedSource,
    wheelhouse: Path,
) -> InstallSource:
    """Every wheel of the folder but the local wheels' twins; it must hold the pinned sglang
    (unless a fork's tree stands for it)."""
    img = profile.image
    own_names = {w.name for w in own}
    wheels = [w for w in sorted(wheelhouse.glob("*.whl")) if not _is_one_of(w.name, own_names)]
    versions = dict(named for named in (wheel_name_version(w.name) for w in wheels) if named)
    if not source.is_fork and versions.get("sglang") != img.runtime_version:
        raise FieldSentenceError(
            "wheelhouse",
            f"has no sglang {img.runtime_version} wheel (found {versions.get('sglang') or 'none'})",
            value=str(wheelhouse),
            hint=f"download it there: pip download --no-deps --dest {wheelhouse} sglang=={img.runtime_version}",
        )
    return InstallSource(
        pip_source="--no-index --find-links /tmp/deploytool/wheels",
        wheel_versions=versions,
        files={f"wheels/{wheel.name}": wheel for wheel in wheels},
    )


def _is_one_of(filename: str, names: set[str]) -> bool:
    named = wheel_name_version(filename)
    return named is not None and named[0] in names
