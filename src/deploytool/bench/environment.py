"""The client and server environment a run records: who measured what, where, on which GPU."""

from __future__ import annotations

import os
import platform
import socket
import sys
from typing import Any
from urllib.parse import urlparse

from .. import __version__
from ..checks.targets import Target


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
        "release": None
        if release is None
        else {
            "slot": release.slot,
            "release": release.release,
            "image": release.image,
            "container": release.container_name,
            "gpus": list(release.gpus),
            "simulator": release.simulator,
        },
        "gpus": local_gpus(target) if _is_local(target.url) else None,
    }


def _is_local(url: str) -> bool:
    host = urlparse(url).hostname or ""
    return host in ("127.0.0.1", "localhost", "::1", socket.gethostname()) or host.startswith("127.")


def local_gpus(target: Target) -> list[dict[str, Any]] | None:
    """The serving GPUs from NVML (all of them for a --url target); None without a driver. With
    each card's power limit and PCIe link, which the source puts beside its figures."""
    from ..host.gpus import read_inventory

    inventory = read_inventory()
    if inventory.error:
        return None
    wanted = set(target.release.gpus) if target.release and target.release.gpus else None
    return [
        {
            "index": g.index,
            "uuid": g.uuid,
            "name": g.name,
            "memory_gib": None if g.memory_total_mib is None else round(g.memory_total_mib / 1024, 1),
            "driver": inventory.driver_version,
            "power_limit_w": g.power_limit_w,
            "pcie": g.pcie_text(),
            "pci_bus_id": g.pci_bus_id,
            "numa_node": g.numa_node,
        }
        for g in inventory.gpus
        if not wanted or g.uuid in wanted
    ]
