"""Image recipes: what goes into a build context for one kind of image.

A recipe is a folder `images/<recipe>/` (its Dockerfile.j2 and files, e.g. patch series) plus
a module here with two functions:

    check(profile) -> None
        Refuse an impossible combination of pinned versions before anything is built
        (raise errors.UsageError naming the profile field).
    declare(profile, *, wheelhouse) -> RecipeInputs
        Say, without writing or downloading anything, what the build context holds besides
        the recipe folder (files by source path or text, and folders fetched at build time),
        which values the Dockerfile template gets and which make up the toolchain fingerprint.

build.py does the rest for every recipe: hashes the declared inputs into the tag (a pure
function: `render` needs no engine and no download), materialises the context only when it
builds (`materialise`), labels the image and shows progress.
"""

from __future__ import annotations

import importlib
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from ...errors import UsageError
from ...resources import resource


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
    # What the context holds besides the recipe folder: name in the context -> a file or
    # folder to copy, or a text to write. Hashed into the tag from where it lies.
    files: dict[str, Path | str] = field(default_factory=dict)
    # Files fetched only when the image is built (e.g. downloaded wheels): name of a folder in
    # the context -> a function that returns a folder (every file in it is put there) or a
    # list of files. Their identity must be in the declared inputs (e.g. the pinned
    # requirements, or a lock file of sha256s), since the tag is computed without them.
    fetched: dict[str, Callable[[], Path | list[Path]]] = field(default_factory=dict)
    # Image labels of the recipe's own (e.g. a fork's commit), beside build.py's.
    labels: dict[str, str] = field(default_factory=dict)
    # What a build journals beside the image and no label holds: where on this host an input
    # was read (a fork's checkout, a tree, a series folder), which is not part of its identity.
    journal: dict[str, str] = field(default_factory=dict)
    # What `up --dry-run` says of the runtime these inputs resolved (a fork, a series, local
    # wheels: runtime_source.runtime_notes), so that planning the release resolves it no more.
    notes: list[str] = field(default_factory=list)


IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc")


def materialise(inputs: RecipeInputs, context_dir: Path) -> RecipeInputs:
    """Write what `inputs` declares into a build context folder."""
    for name, source in inputs.files.items():
        target = context_dir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(source, str):
            target.write_text(source)
        elif source.is_dir():
            shutil.copytree(source, target, ignore=IGNORED)
        else:
            link_or_copy(source, target)
    for name, fetch in inputs.fetched.items():
        got = fetch()
        items = got if isinstance(got, list) else sorted(got.iterdir())
        (context_dir / name).mkdir(parents=True, exist_ok=True)
        for item in items:
            if item.is_file() and not item.name.startswith("."):
                link_or_copy(item, context_dir / name / item.name)
    return inputs


def link_or_copy(source: Path, target: Path) -> None:
    """Hard-link when possible: a wheelhouse can be hundreds of MB."""
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)  # materialising again into the same folder replaces the file
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def recipe_dir(name: str) -> Path:
    path = resource("images", name)
    if not (path / "Dockerfile.j2").is_file():
        known = sorted(p.name for p in resource("images").iterdir() if (p / "Dockerfile.j2").is_file())
        raise UsageError(
            f"unknown image recipe {name!r} (no images/{name}/Dockerfile.j2)",
            hint=f"known recipes: {', '.join(known)}",
        )
    return path


def load_recipe(name: str) -> ModuleType:
    recipe_dir(name)
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        raise UsageError(f"image recipe {name!r} has no module deploytool.image.recipes.{name}") from exc
