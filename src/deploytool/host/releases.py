"""A deploytool container as the engine describes it: the labels deploytool put on it and its
state. Read back from the engine's container inspect data, whichever way that was fetched (the
Docker SDK in engine.py, or engine_api.py for the commands that only look)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import labels


@dataclass
class Release:
    """One deploytool container, read back from the engine's labels and state."""

    slot: str
    release: int
    profile: str
    image: str
    container_id: str
    container_name: str
    state: str  # running, exited, created, restarting, ...
    health: str | None  # starting, healthy, unhealthy, or None without a healthcheck
    host_port: int
    gpus: list[str]
    simulator: bool
    created: str
    restart_count: int = 0  # the engine's restarts under `restart: unless-stopped`
    host_ip: str = "127.0.0.1"  # the address the port is published on
    model: str = ""  # the weights it serves (labels.MODEL); "" for releases made before the label existed
    api_key: bool = False  # the server wants an API key (labels.API_KEY)
    exposed_without_key: bool = (
        False  # published beyond loopback without a key, on purpose (labels.EXPOSED_WITHOUT_KEY)
    )
    started: str = ""  # when the container last started (the engine's State.StartedAt, RFC 3339)
    instance: str = ""  # the deploytool instance that made it (labels.INSTANCE)

    @property
    def running(self) -> bool:
        return self.state == "running"

    @property
    def url(self) -> str:
        """Where this host reaches the release: its published address, or loopback for a
        wildcard publish."""
        return published_url(self.host_ip, self.host_port)


def published_url(host_ip: str, port: int) -> str:
    """Where this host reaches a port published on `host_ip` (loopback for a wildcard)."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host_ip, host_ip)  # nosec B104: maps a wildcard publish to loopback for a client; binds nothing
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def release_from_inspect(attrs: dict[str, Any]) -> Release:
    """A Release from one container's inspect data (GET /containers/{id}/json)."""
    state = attrs.get("State", {})
    lab = attrs.get("Config", {}).get("Labels", {}) or {}
    return Release(
        slot=lab.get(labels.SLOT, "?"),
        release=int(lab.get(labels.RELEASE, "0")),
        profile=lab.get(labels.PROFILE, "?"),
        image=lab.get(labels.IMAGE, attrs.get("Config", {}).get("Image", "?")),
        container_id=attrs.get("Id", ""),
        container_name=str(attrs.get("Name", "")).lstrip("/"),
        state=state.get("Status", "unknown"),
        health=(state.get("Health") or {}).get("Status"),
        host_port=int(lab.get(labels.HOST_PORT, "0")),
        gpus=[g for g in lab.get(labels.GPUS, "").split(",") if g],
        simulator=lab.get(labels.SIMULATOR) == "true",
        created=attrs.get("Created", ""),
        restart_count=int(attrs.get("RestartCount", 0) or 0),
        host_ip=lab.get(labels.HOST_IP, "127.0.0.1"),
        model=lab.get(labels.MODEL, ""),
        api_key=lab.get(labels.API_KEY) == "required",
        exposed_without_key=lab.get(labels.EXPOSED_WITHOUT_KEY) == "true",
        started=str(state.get("StartedAt", "") or ""),
        instance=lab.get(labels.INSTANCE, ""),
    )
