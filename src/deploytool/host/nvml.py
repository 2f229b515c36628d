"""Which NVML deploytool reads: the driver's, through nvidia-ml-py, or a described host's.

DEPLOYTOOL_NVML_STANDIN=FILE makes every command read the host described in FILE through the
stand-in NVML (nvml_standin.py) instead of the driver: for tests, and to see what deploytool
would do on a host one does not have (docs/gpus.md, "A described host").
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

STANDIN_ENV = "DEPLOYTOOL_NVML_STANDIN"


def described_host() -> str | None:
    """The host file DEPLOYTOOL_NVML_STANDIN names (the host is described, not read), or None."""
    return os.environ.get(STANDIN_ENV) or None


def nvml_library() -> Any:
    """pynvml, the stand-in over DEPLOYTOOL_NVML_STANDIN's host, or None without nvidia-ml-py."""
    described = described_host()
    if described:
        from ..errors import DeploytoolError
        from .nvml_standin import StandInNvml  # pydantic and the host schema: only when asked for

        try:
            return StandInNvml.from_file(Path(described))
        except DeploytoolError as exc:
            # the file was never named on the command line: say where it came from
            exc.message = f"{STANDIN_ENV} names a host file that cannot be used: {exc.message}"
            exc.hint = exc.hint or (
                f'fix the host file (docs/gpus.md, "A described host"), or unset {STANDIN_ENV} '
                "to read this host's driver"
            )
            raise
    try:  # nvidia-ml-py; the import itself works without a driver, nvmlInit does not
        import pynvml
    except ImportError:  # pragma: no cover - it is a dependency, but keep the message clear
        return None
    return pynvml


def optional(read: Callable[..., Any], *args: Any) -> Any:
    """read(*args), or None when NVML cannot give it (NVMLError_NotSupported and friends: the
    reading is simply absent, never an error; a function an older pynvml lacks, likewise). A
    loop's reads pass the loop's values as args, so none reads a later turn's."""
    try:
        return read(*args)
    except Exception:
        return None


def refuse_on_described_host(gpu_slots: list[str], command: str) -> None:
    """A described host's cards are not this machine's: starting a server on their UUIDs would
    ask Docker for cards that are not there (or, by chance, for others). Plans are fine."""
    described = described_host()
    if described and gpu_slots:
        from ..errors import UsageError

        raise UsageError(
            f"{command} on {', '.join(gpu_slots)}: the host is described by {STANDIN_ENV}={described}, "
            "not read from this machine's driver, so its GPU UUIDs are not cards here",
            hint=f"--dry-run plans on the described host; unset {STANDIN_ENV} to deploy on this host's cards",
        )
