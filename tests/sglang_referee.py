"""Shared by the conformance tests: sglang 0.5.23's own code, run in the referee environment
(deploytool.image.referee: the parser venv plus sglang's serving packages) in a subprocess, because
deploytool's venv has no sglang. Tests skip, saying why, only when that environment cannot be
built here."""

from __future__ import annotations

import pytest

from deploytool.errors import DeploytoolError
from deploytool.image.referee import referee_python, run_referee

_PROBLEM: list[str | None] = []


def require_referee() -> None:
    if not _PROBLEM:
        try:
            referee_python()
            _PROBLEM.append(None)
        except DeploytoolError as exc:  # no package index and no cached environment
            _PROBLEM.append(f"sglang's referee environment cannot be built here: {exc.message.splitlines()[0]}")
    if _PROBLEM[0]:
        pytest.skip(_PROBLEM[0])


def referee(script: str, payload: object) -> object:
    require_referee()
    return run_referee(script, payload)
