"""The client and server environment a run records: who measured what, where, on which GPU."""

from __future__ import annotations

import os
import platform
import socket
import sys
from typing import Any
from urllib.parse import urlparse

from .. import __version__
from ..release.targets import Target


def describe_environment(target: Target) -> dict[str, Any]:
    release = target.release
    return {
        "deploytool_version": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "client_host": socket.gethostname(),
        "client_cpus": os.cpu_count(),
        "client": "deploytool.server.client.EndpointClient (httpx, SSE)",
        "endpoint": target.url,
        "target": target.describe(),
        "profile": target.profile.name if target.profile else None,
        "image_labels": dict(target.image_labels or {}),
        "release": None if release is None else {
            "slot": release.slot, "release": release.release, "image": release.image,
            "container": release.container_name, "gpus": list(release.gpus), "simulator": release.simulator,
        },
        "gpus": local_gpus(target) if _is_local(target.url) else None,
    }


def _is_local(url: str) -> bool:
    host = urlparse(url).hostname or ""
    return host in ("127.0.0.1", "localhost", "::1", socket.gethostname()) or host.startswith("127.")


def local_gpus(target: Target) -> list[dict[str, Any]] | None:
    """The serving GPUs from NVML (all of them for a --url target); None without a driver."""
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver / no library: nothing to record
        return None
    try:
        wanted = set(target.release.gpus) if target.release and target.release.gpus else None
        driver = pynvml.nvmlSystemGetDriverVersion()
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
            if wanted and uuid not in wanted:
                continue
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            out.append({
                "index": i, "uuid": uuid, "name": _text(pynvml.nvmlDeviceGetName(handle)),
                "memory_gib": round(memory.total / 2**30, 1), "driver": _text(driver),
            })
        return out
    except Exception:  # noqa: BLE001
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
