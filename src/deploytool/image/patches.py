"""`deploytool patches check`: does a profile's patch series apply to its pinned sglang?

The pinned sglang wheel is downloaded once (`pip download --no-deps`) into deploytool's cache
and unpacked there; each check links those sources into a temporary folder and applies the
series with the same applier the image build uses (deploytool.image.in_image.unidiff), reporting each patch
as applied or failed with the hunks it refused. Nothing is built.

Patch series live in images/sglang/patches/<sglang-version>/: the patch files and a `series`
file naming them in order. A profile applies the whole series, or the patches it lists in
`image.patches` (in that order), or none with `image.patches: [none]` (stock sglang).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import CouldNotRun, DeploytoolError, ProfileError, UsageError
from ..profiles import Profile
from ..profiles.image_source import local_path
from ..release.state import cache_dir
from ..resources import resource
from .in_image import unidiff

if TYPE_CHECKING:  # runtime_source is imported where it is used: resolving a source is rare here
    from .runtime_source import ResolvedSource

RECIPE = "sglang"
# `image.patches: [none]`: the pinned sglang as released, no patch at all. An empty list
# cannot say it: it means the whole series.
NO_PATCHES = "none"


@dataclass
class PatchSeries:
    sglang_version: str
    folder: Path
    names: list[str]

    def paths(self) -> list[Path]:
        return [self.folder / n for n in self.names]


@dataclass
class PatchCheck:
    profile: str
    sglang_version: str
    wheel: str  # what the series was applied to: the wheel's file, or a fork's tree
    series: str
    expected: int = 0  # patches in the series
    results: list[unidiff.PatchResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every patch of the series applied (an empty series is trivially fine)."""
        return len(self.results) == self.expected and all(r.applied for r in self.results)


def series_dir(sglang_version: str) -> Path:
    return resource("images", RECIPE, "patches", sglang_version)


def series_folder(profile: Profile) -> Path:
    """The folder the profile's patches come from: image.source.series when it names one (a
    series `patches import` wrote), else the release's shipped folder."""
    series = profile.image.source.series
    return local_path(profile.source, series) if series else series_dir(profile.image.runtime_version or "")


def series_for(profile: Profile) -> PatchSeries:
    """The ordered patches a profile's image gets: the release's series (or the folder
    image.source.series names) on the wheel; on a fork's tree, only those image.patches names
    from the release's folder (a fork carries its changes as commits)."""
    version = profile.image.runtime_version
    if not version:
        raise ProfileError(f"profile {profile.name!r}: image.runtime_version (the sglang release) is not set")
    source = profile.image.source
    if source.kind != "wheel" and not profile.image.patches:
        return PatchSeries(sglang_version=version, folder=series_dir(version), names=[])
    folder = series_folder(profile)
    if not folder.is_dir() or not (profile.image.patches or (folder / "series").is_file()):
        # A release without its patch folder or `series` file is not a release without patches:
        # an empty `series` file says that on purpose.
        missing_path = folder / "series" if folder.is_dir() else folder
        raise ProfileError(
            f"profile {profile.name!r}: image.runtime_version = {version!r} has no patch series: "
            f"{missing_path} does not exist",
            hint=f"add {folder}/series naming its patches in order (an empty file for none), "
            "or pin a release that has one",
        )
    if NO_PATCHES in profile.image.patches:
        if profile.image.patches != [NO_PATCHES]:
            raise ProfileError(
                f"profile {profile.name!r}: image.patches names `{NO_PATCHES}` beside patches",
                hint=f"`[{NO_PATCHES}]` alone for stock sglang, or the patch file names",
            )
        names = []
    elif profile.image.patches:
        names = list(profile.image.patches)
    else:
        names = unidiff.read_series(folder / "series")
    # a name is a file of the folder: never a path that climbs out of it or starts elsewhere
    strays = [f"{n!r} ({why})" for n in names if (why := unidiff.unsafe_path(n))]
    if strays:
        raise ProfileError(
            f"profile {profile.name!r}: patch name(s) {', '.join(strays)} are not files of {folder}",
            hint="name patch files of the series folder, without a folder part that leaves it",
        )
    missing = [n for n in names if not (folder / n).is_file()]
    if missing:
        raise ProfileError(
            f"profile {profile.name!r}: patch(es) {', '.join(missing)} not found in {folder}",
            hint="list files of that folder in image.patches, or leave it empty to apply its `series`",
        )
    return PatchSeries(sglang_version=version, folder=folder, names=names)


def sglang_wheel(version: str, python: str = "3.11") -> Path:
    """The pinned sglang wheel for the image's Python, downloaded once into the cache."""
    target = cache_dir("sglang", "wheels")
    tag = "cp" + python.replace(".", "")
    found = sorted(target.glob(f"sglang-{version}-{tag}-*.whl")) + sorted(
        target.glob(f"sglang-{version}-py3-*.whl")
    )
    if found:
        return found[0]
    arch = {"arm64": "aarch64"}.get(platform.machine(), platform.machine())
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--quiet",
        "--dest",
        str(target),
        "--python-version",
        python,
        "--implementation",
        "cp",
        *(a for n in (36, 34, 28, 17) for a in ("--platform", f"manylinux_2_{n}_{arch}")),
        f"sglang=={version}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted(target.glob(f"sglang-{version}-{tag}-*.whl")) + sorted(
        target.glob(f"sglang-{version}-py3-*.whl")
    )
    if proc.returncode != 0 or not found:
        raise CouldNotRun(
            f"could not download sglang {version} for Python {python}:\n"
            + "\n".join("    " + x for x in (proc.stderr or proc.stdout).strip().splitlines()[-8:]),
            hint=f"put the wheel (sglang-{version}-*.whl) into {target} by hand on a host without a package index",
        )
    return found[0]


def unpacked_sources(wheel: Path) -> Path:
    """The wheel unpacked once into the cache (read-only by convention: never patched in place)."""
    root = cache_dir("sglang", "src", wheel.stem)
    if (root / ".complete").exists():
        return root
    partial = Path(tempfile.mkdtemp(prefix=".unpack-", dir=root.parent))
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(partial)
    (partial / ".complete").write_text(wheel.name + "\n")
    shutil.rmtree(root, ignore_errors=True)
    partial.rename(root)
    return root


def link_tree(source: Path, dest: Path) -> Path:
    """A copy of `source` made of hard links (a second or less for 130 MB); the applier
    replaces the files it changes, so the cached sources stay untouched."""

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, dest, copy_function=link, ignore=shutil.ignore_patterns(".complete"))
    return dest


def check(profile: Profile, *, series: PatchSeries | None = None) -> PatchCheck:
    """Apply the profile's series to the pinned sglang's sources in a temporary folder."""
    if profile.image.recipe != RECIPE:
        raise UsageError(
            f"profile {profile.name!r} uses recipe {profile.image.recipe!r}: only `sglang` images carry patches"
        )
    series = series or series_for(profile)
    sources, origin = _pristine(profile, series)
    report = PatchCheck(
        profile=profile.name,
        sglang_version=series.sglang_version,
        wheel=origin,
        series=str(series.folder),
        expected=len(series.names),
    )
    if not series.names:
        return report
    with tempfile.TemporaryDirectory(prefix="patches-check-") as tmp:
        tree = link_tree(sources, Path(tmp) / "site")
        report.results = unidiff.apply_series(tree, series.folder, series.names)
    return report


def patched_tree(profile: Profile, dest: Path) -> Path:
    """A full copy of the pinned sglang with the series applied (what the image gets), e.g. to
    import a patched module on a CPU. Raises when a patch does not apply."""
    series = series_for(profile)
    sources, _ = _pristine(profile, series)
    tree = link_tree(sources, dest)
    for result in unidiff.apply_series(tree, series.folder, series.names):
        if not result.applied:
            raise DeploytoolError(
                f"patch {result.name} does not apply to sglang {series.sglang_version}",
                hint="run `deploytool patches check --profile " + profile.name + "` for the refused hunks",
            )
    return tree


def patched_release(profile: Profile, source: ResolvedSource) -> Path:
    """The pinned release with the profile's series applied, once per wheel and series content
    in the cache (read-only by convention): what `profiles check` reads a wheel profile's flags
    from when its series is its own (`source`: runtime_source.resolve(profile))."""
    wheel = sglang_wheel(series_for(profile).sglang_version, profile.image.python)
    root = cache_dir("sglang", "patched", f"{wheel.stem}-{source.digest}")
    if (root / ".complete").exists():
        return root
    partial = Path(tempfile.mkdtemp(prefix=".patch-", dir=root.parent))
    try:
        patched_tree(profile, partial / "tree")
        (partial / "tree" / ".complete").write_text(source.identity + "\n")
        shutil.rmtree(root, ignore_errors=True)
        (partial / "tree").rename(root)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return root


def _pristine(profile: Profile, series: PatchSeries) -> tuple[Path, str]:
    """(the unpatched sources the image starts from, what they are): the pinned wheel
    unpacked, or a fork's tree at its commit (or a local tree as hashed)."""
    from . import runtime_source

    source = runtime_source.resolve(profile)
    if source.is_fork:
        return runtime_source.unpacked(source), source.describe()
    wheel = sglang_wheel(series.sglang_version, profile.image.python)
    return unpacked_sources(wheel), wheel.name
