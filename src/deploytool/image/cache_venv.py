"""Installing into the environments deploytool keeps in its cache (the sglang parser venv and
the referee's serving packages).

pip byte-compiles every module it installs: for torch, triton and sglang that was half the CPU
of making the parser venv (68 s of CPU with it, 33 s without, on the 2-core development
machine), while a check imports a small part of them. So pip installs without compiling, and
one import of what the environment's callers import writes the bytecode of exactly those
modules, with PYTHONDONTWRITEBYTECODE lifted for that one process: deploytool owns the
environment, and a person who sets the variable would otherwise compile those modules again at
every check (about 6 s more each)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

_IMPORT_EACH = """import importlib, sys
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception:  # a CPU environment may lack what a module imports: its callers say so
        pass
"""


def pip_install(python: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-compile", *args],
        capture_output=True,
        text=True,
    )


def compile_by_importing(python: Path, modules: list[str]) -> None:
    """Import `modules` once in the environment so their bytecode is written (best effort: a
    module that does not import is compiled when it first does, or reported by its caller)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with contextlib.suppress(subprocess.TimeoutExpired):
        subprocess.run([str(python), "-c", _IMPORT_EACH, *modules], capture_output=True, env=env, timeout=600)
