"""Recipe `sim`: the reference runtime on a plain Debian base, for machines without a GPU.

Its wheels (images/sim/requirements.txt) are downloaded once for the image's Python and
platform into deploytool's cache when the image is built, or taken from --wheelhouse, so the
build itself needs no package index; the tag covers the pins, not the downloaded files. The
deploytool package is copied in as source, so a change to the simulator changes the image's
inputs and therefore its tag.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from ...errors import BuildError, UsageError
from ...profiles import Profile
from ...release.state import cache_dir
from ...resources import package_dir
from . import RecipeInputs, materialise, recipe_dir


def check(profile: Profile) -> None:
    if profile.image.cuda or profile.image.runtime_version:
        raise UsageError(
            f"profile {profile.name}: the sim recipe takes no image.cuda or image.runtime_version "
            "(it runs on a CPU); use recipe `sglang` for a real runtime"
        )
    source = profile.image.source
    if source.kind != "wheel" or source.series or profile.image.wheels:
        raise UsageError(
            f"profile {profile.name}: the sim recipe takes no image.source or image.wheels "
            "(it is deploytool's own reference runtime); use recipe `sglang` for a fork or your own wheels"
        )


def declare(profile: Profile, *, wheelhouse: Path | None) -> RecipeInputs:
    requirements = recipe_dir("sim") / "requirements.txt"
    pins = {line.split("==")[0]: line.split("==")[1] for line in _pins(requirements)}
    files: dict[str, Path | str] = {"deploytool": package_dir()}
    fetched: dict[str, Callable[[], Path | list[Path]]] = {}
    if wheelhouse is not None:
        files.update({f"wheels/{wheel.name}": wheel for wheel in sorted(wheelhouse.glob("*.whl"))})
    else:
        fetched["wheels"] = lambda: _cached_wheels(requirements, profile.image.python)
    return RecipeInputs(
        template_vars={"command_json": json.dumps(profile.launch_argv())},
        fingerprint={"python": profile.image.python, "cuda": "none", **pins},
        extra_hash_inputs={"wheels": "--wheelhouse" if wheelhouse else "downloaded for requirements.txt"},
        files=files,
        fetched=fetched,
    )


def prepare(profile: Profile, *, context_dir: Path, wheelhouse: Path | None) -> RecipeInputs:
    return materialise(declare(profile, wheelhouse=wheelhouse), context_dir)


def _pins(requirements: Path) -> list[str]:
    return [
        line.strip()
        for line in requirements.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]


def _cached_wheels(requirements: Path, python: str) -> Path:
    """Download the pinned wheels (and their dependencies) for the image's Python once."""
    machine = platform.machine()
    key = "-".join(p.replace("==", "_") for p in _pins(requirements))
    target = cache_dir("wheels", f"sim-py{python}-{machine}", key)
    if any(target.glob("*.whl")) and (target / ".complete").exists():
        return target
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--only-binary=:all:",
        "--dest",
        str(target),
        "--python-version",
        python,
        "--implementation",
        "cp",
        *(arg for tag in _platforms(machine) for arg in ("--platform", tag)),
        "-r",
        str(requirements),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(
            "could not download the sim image's wheels:\n" + proc.stderr[-1500:],
            hint="on a host without a package index, pass --wheelhouse DIR with those wheels",
        )
    (target / ".complete").write_text("ok\n")
    return target


def _platforms(machine: str) -> list[str]:
    arch = {"x86_64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}.get(machine, machine)
    return [f"manylinux_2_{n}_{arch}" for n in (36, 34, 28, 27, 17)] + [f"manylinux2014_{arch}"]
