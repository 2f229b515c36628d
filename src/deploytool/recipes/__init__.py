"""Image recipes: what goes into a build context for one kind of image.

A recipe is a folder `images/<recipe>/` (its Dockerfile.j2 and files, e.g. patch series) plus
a module here with two functions:

    check(profile) -> None
        Refuse an impossible combination of pinned versions before anything is built
        (raise errors.UsageError naming the profile field).
    prepare(profile, *, context_dir, wheelhouse) -> RecipeInputs
        Copy what the Dockerfile needs into context_dir (wheels, patches, sources) and say
        which values the Dockerfile template gets and which make up the toolchain fingerprint.

build.py does the rest for every recipe: renders the template, hashes every input into the
tag, labels the image, builds through the Docker SDK and shows progress.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import UsageError
from ..resources import resource


@dataclass
class RecipeInputs:
    # Values the Dockerfile.j2 template is rendered with (besides `profile` and `labels`).
    template_vars: dict[str, Any] = field(default_factory=dict)
    # The toolchain fingerprint: what compiled the kernels (CUDA, nvcc, gcc, torch, triton,
    # sglang, sglang-kernel, flashinfer, patch hashes, ...). Stored as an image label and
    # compared with the slot's JIT cache by cache.py.
    fingerprint: dict[str, str] = field(default_factory=dict)
    # Anything else that changes the image but is not a file in the context (e.g. a wheel list).
    extra_hash_inputs: dict[str, str] = field(default_factory=dict)


def recipe_dir(name: str) -> Path:
    path = resource("images", name)
    if not (path / "Dockerfile.j2").is_file():
        known = sorted(p.name for p in resource("images").iterdir() if (p / "Dockerfile.j2").is_file())
        raise UsageError(f"unknown image recipe {name!r} (no images/{name}/Dockerfile.j2)",
                         hint=f"known recipes: {', '.join(known)}")
    return path


def load_recipe(name: str) -> ModuleType:
    recipe_dir(name)
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        raise UsageError(f"image recipe {name!r} has no module deploytool.recipes.{name}") from exc
