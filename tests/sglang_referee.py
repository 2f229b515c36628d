"""Shared by the conformance tests: sglang 0.5.23's own code, run in the referee environment
(deploytool.image.referee: the parser venv plus sglang's serving packages) in a subprocess, because
deploytool's venv has no sglang. The environment comes from conftest's session fixture
`sglang_referee_python`, which makes it (or skips, saying why, where it cannot be built)."""

from __future__ import annotations

from pathlib import Path

from deploytool.image.referee import run_referee


def referee(python: Path, script: str, payload: object) -> object:
    return run_referee(script, payload, python=python)
