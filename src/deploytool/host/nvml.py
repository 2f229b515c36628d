"""Which NVML deploytool reads: the driver's, through nvidia-ml-py, or a described host's.

DEPLOYTOOL_NVML_STANDIN=FILE makes every command read the host described in FILE through the
stand-in NVML (nvml_standin.py) instead of the driver: for tests, and to see what deploytool
would do on a host one does not have (docs/gpus.md, "A described host").
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

STANDIN_ENV = "DEPLOYTOOL_NVML_STANDIN"


def nvml_library() -> Any:
    """pynvml, the stand-in over DEPLOYTOOL_NVML_STANDIN's host, or None without nvidia-ml-py."""
    described = os.environ.get(STANDIN_ENV)
    if described:
        from .nvml_standin import StandInNvml  # pydantic and the host schema: only when asked for

        return StandInNvml.from_file(Path(described))
    try:  # nvidia-ml-py; the import itself works without a driver, nvmlInit does not
        import pynvml
    except ImportError:  # pragma: no cover - it is a dependency, but keep the message clear
        return None
    return pynvml



def optional(read: Callable[[], Any]) -> Any:
    """A reading, or None when NVML cannot give it (NVMLError_NotSupported and friends: the
    reading is simply absent, never an error)."""
    try:
        return read()
    except Exception:
        return None
