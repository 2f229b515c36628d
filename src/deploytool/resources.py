"""Where deploytool's own data lives: images/, compose/, profiles/, qualify/ at the project root.

These folders sit beside `src/` so the layout shows the architecture; deploytool is installed
from its source tree (`pip install -e .`, what the README does), and DEPLOYTOOL_RESOURCES can
point at a copy of those folders for any other kind of installation.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import UsageError

_PACKAGE_DIR = Path(__file__).resolve().parent


def project_root() -> Path:
    override = os.environ.get("DEPLOYTOOL_RESOURCES")
    root = Path(override) if override else _PACKAGE_DIR.parents[1]
    if not (root / "profiles").is_dir():
        raise UsageError(
            f"deploytool's data folders (profiles/, images/, compose/) are not under {root}",
            hint="install deploytool from its source tree (pip install -e .) or set DEPLOYTOOL_RESOURCES",
        )
    return root


def resource(*parts: str) -> Path:
    return project_root().joinpath(*parts)


def package_dir() -> Path:
    """The installed `deploytool` package itself (copied into the sim image)."""
    return _PACKAGE_DIR
