"""`deploytool render`: one release's compose document, built as data and dumped with PyYAML.

profile + slot + release number + image -> dict. Nothing here touches the engine; `docker
compose config` validates the result (deploy/ and the tests run it).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from . import labels
from .profiles import Profile
from .resources import resource
from .slots import Slot
from .yamlio import dump_yaml

CACHE_MOUNT = "/cache"


@dataclass
class RenderRequest:
    profile: Profile
    slot: Slot
    release: int
    image: str
    host_port: int | None = None  # default: the profile's port
    bind: str = "127.0.0.1"  # host address the port is published on

    @property
    def port(self) -> int:
        return self.host_port or self.profile.server.port


def render_compose(req: RenderRequest) -> dict[str, Any]:
    profile, slot = req.profile, req.slot
    document = copy.deepcopy(yaml.safe_load(resource("compose", "base.yaml").read_text()))
    document = {"name": slot.project(req.release), **document}
    service = document["services"]["server"]
    health = profile.health
    container_port = profile.server.port
    cache_volume = slot.cache_volume()

    service.update(
        {
            "image": req.image,
            "container_name": f"{slot.project(req.release)}-server",
            "command": profile.launch_argv(),
            "ports": [{"target": container_port, "published": str(req.port), "host_ip": req.bind,
                       "protocol": "tcp"}],
            "environment": dict(profile.server.env),
            "shm_size": profile.server.shm_size,
            "ipc": profile.server.ipc,
            "volumes": [{"type": "volume", "source": "jit-cache", "target": CACHE_MOUNT}],
            "healthcheck": {
                # curl is in the sim base and in the CUDA images; -f fails on 5xx/503.
                "test": ["CMD", "curl", "-fsS", "-o", "/dev/null",
                         f"http://127.0.0.1:{container_port}{health.path}"],
                "interval": f"{health.interval}s",
                "timeout": f"{health.timeout}s",
                "retries": health.retries,
                "start_period": f"{health.start_period}s",
                "start_interval": f"{health.start_interval}s",
            },
            "labels": labels.container_labels(
                slot=slot.name, release=req.release, profile=profile.name, image=req.image,
                gpus=list(slot.gpus), host_port=req.port, host_ip=req.bind, simulator=profile.is_simulator,
            ),
        }
    )
    if profile.server.ulimits:
        service["ulimits"] = dict(profile.server.ulimits)
    if profile.model.host_path:
        service["volumes"].append({"type": "bind", "source": profile.model.host_path,
                                   "target": profile.model.path, "read_only": True})
    if not slot.is_cpu:
        service["deploy"] = {"resources": {"reservations": {"devices": [
            {"driver": "nvidia", "device_ids": list(slot.gpus), "capabilities": ["gpu"]}
        ]}}}
    # The slot's kernel cache outlives releases: deploytool creates and wipes it (cache.py),
    # compose only mounts it, so `docker compose down` of an old release can never remove it.
    document["volumes"] = {"jit-cache": {"external": True, "name": cache_volume}}
    return document


def render_text(req: RenderRequest) -> str:
    return document_text(render_compose(req), profile=req.profile.name, slot=req.slot.name, release=req.release)


def document_text(document: dict[str, Any], *, profile: str, slot: str, release: int) -> str:
    """A rendered compose document as the file deploytool writes (a plan carries the document)."""
    header = (f"# Rendered by deploytool for profile {profile}, slot {slot}, "
              f"release {release}.\n# Do not edit: re-render with `deploytool render`.\n")
    return header + dump_yaml(document)


def write_compose(req: RenderRequest, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_text(req))
    return path
