"""mypy over src/ at the strictness pyproject.toml states: a type error is a failing test, and so is
an ignore that is no longer needed or does not name its error code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_finds_no_error_in_src() -> None:
    pytest.importorskip("mypy", reason="mypy is in the dev extra: pip install -e '.[dev]'")
    # mypy's cache (.mypy_cache, keyed by its version and each file's hash) makes a second run take
    # seconds instead of about fifteen
    run = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, (
        f"mypy (config: pyproject.toml [tool.mypy]):\n{run.stdout[-8000:]}{run.stderr[-2000:]}"
    )


def test_every_type_ignore_says_why() -> None:
    """mypy holds the code each ignore names; the reason after it is for the reader."""
    bare = []
    for path in sorted((ROOT / "src").rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "type: ignore" in line:
                after = line.split("type: ignore", 1)[1]
                # `# type: ignore[code]  # why`: the reason is a comment after the code
                if "]" not in after or "#" not in after.split("]", 1)[1]:
                    bare.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not bare, "say why after each ignore (`# type: ignore[code]  # because ...`):\n" + "\n".join(bare)
