"""Where deploytool's own data lives (the folders profiles/, images/, compose/ and qualify/), and
the user's own (user_config_dir: profiles and hooks).

In the source tree they sit at the project root beside src/ (people edit them there, and the
layout shows the architecture). A wheel carries the same folders as package data,
deploytool/_data/<folder> (pyproject.toml maps them in). One lookup serves both: the package's
`_data` through importlib.resources when the package holds it (an installed wheel, the qualify
image), else the tree the package was imported from (an editable install, `make setup`).
DEPLOYTOOL_RESOURCES points at a copy of those folders for anything else.
"""

from __future__ import annotations

import os
from importlib import resources as _resources
from pathlib import Path

from .errors import UsageError

DATA_FOLDERS = ("profiles", "images", "compose", "qualify")
PACKAGED = "_data"  # the folder of the package that holds DATA_FOLDERS in a wheel
OVERRIDE_ENV = "DEPLOYTOOL_RESOURCES"


def package_dir() -> Path:
    """The imported `deploytool` package itself (copied into the sim image)."""
    found = _resources.files("deploytool")
    if not isinstance(found, Path):  # a zip import: images and templates need real files
        raise UsageError(
            f"deploytool is imported from {found}, not from a folder",
            hint="install it with pip, pipx or uv (they unpack the wheel)",
        )
    return found


def data_origin() -> tuple[Path, str]:
    """(the folder that holds DATA_FOLDERS, where it comes from: 'package data', 'source tree'
    or the override variable)."""
    override = os.environ.get(OVERRIDE_ENV)
    if override:
        root, origin = Path(override), OVERRIDE_ENV
    else:
        packaged = package_dir() / PACKAGED
        if packaged.is_dir():
            root, origin = packaged, "package data"
        else:
            root, origin = package_dir().parents[1], "source tree"  # src/deploytool -> the tree
    if not (root / "profiles").is_dir():
        raise UsageError(
            f"deploytool's data folders ({', '.join(f + '/' for f in DATA_FOLDERS)}) are not under {root} "
            f"(from the {origin})",
            hint="install deploytool from a wheel built from its tree (`python -m build`), or from the tree "
            f"itself (pip install -e .); {OVERRIDE_ENV}=DIR names a folder that holds them",
        )
    return root, origin


def data_root() -> Path:
    return data_origin()[0]


def resource(*parts: str) -> Path:
    return data_root().joinpath(*parts)


def user_config_dir(*parts: str) -> Path:
    """The user's own deploytool folder (profiles, hooks): $XDG_CONFIG_HOME/deploytool, else
    ~/.config/deploytool (the XDG base directory rule: a relative XDG_CONFIG_HOME is ignored)."""
    base = os.environ.get("XDG_CONFIG_HOME", "")
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".config"
    return root.joinpath("deploytool", *parts)
