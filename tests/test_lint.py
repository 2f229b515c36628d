"""ruff's linter and formatter hold the tree, as the architecture test holds the layering: a finding
or an unformatted file is a failing test (the rule set and its reasons: pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> str:
    found = Path(sys.executable).with_name("ruff")
    if found.exists():
        return str(found)
    on_path = shutil.which("ruff")
    if on_path is None:
        pytest.skip("ruff is not installed here (it is in the dev extra: pip install -e '.[dev]')")
    return on_path


def test_ruff_finds_nothing_in_the_tree() -> None:
    run = subprocess.run(
        [_ruff(), "check", "--no-cache", "--output-format", "concise", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, f"ruff check found:\n{run.stdout[-6000:]}{run.stderr[-2000:]}"


def test_the_tree_is_formatted() -> None:
    run = subprocess.run(
        [_ruff(), "format", "--no-cache", "--check", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, (
        f"run `ruff format .`; these differ:\n{run.stdout[-6000:]}{run.stderr[-2000:]}"
    )
