"""The Docker engine, as deploytool uses it: the Docker SDK for objects (containers, images,
volumes, builds) and the real `docker compose` plugin for compose projects.

Callers get typed `Release` objects, not the SDK's dicts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import docker
import docker.errors

from . import labels
from .errors import DeployError, EngineUnavailable

HOW_TO_GET_AN_ENGINE = (
    "start a Docker Engine >= 25 with the compose v2 plugin (on Debian as root: "
    "`.ci/docker-engine.sh install && .ci/docker-engine.sh start`; see docs/install.md)"
)


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
    model: str = ""  # the weights it serves (labels.MODEL); "" for releases made before issue 13
    api_key: bool = False  # the server wants an API key (labels.API_KEY)

    @property
    def running(self) -> bool:
        return self.state == "running"

    @property
    def url(self) -> str:
        """Where this host reaches the release: its published address, or loopback for a
        wildcard publish."""
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(self.host_ip, self.host_ip)
        return f"http://[{host}]:{self.host_port}" if ":" in host else f"http://{host}:{self.host_port}"


class Engine:
    def __init__(self, client: docker.DockerClient | None = None):
        if client is None:
            try:
                client = docker.from_env(timeout=120)
                client.ping()
            except docker.errors.DockerException as exc:
                raise EngineUnavailable(f"no Docker engine is reachable ({_short(exc)})",
                                        hint=HOW_TO_GET_AN_ENGINE) from None
        self.client = client

    @cached_property
    def server_version(self) -> str:
        return str(self.client.version().get("Version", "unknown"))

    # -- compose ---------------------------------------------------------------------------
    def compose(self, project: str, compose_file: Path, *args: str, check: bool = True,
                timeout: float = 600, secret_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """`secret_env`: values compose's `secrets: {environment: VAR}` read (deploytool.secrets);
        they live in this one subprocess's environment only."""
        cmd = [_docker_cli(), "compose", "-p", project, "-f", str(compose_file), *args]
        env = {**os.environ, **secret_env} if secret_env else None
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            raise DeployError(f"`{' '.join(cmd)}` did not finish within {timeout:g} s") from None
        if check and proc.returncode != 0:
            raise DeployError(f"`docker compose {' '.join(args)}` failed for project {project}:\n"
                              + _tail(proc.stderr or proc.stdout, 15))
        return proc

    def compose_config(self, compose_file: Path) -> str:
        """`docker compose config`: the plugin's own validation of a rendered file."""
        cmd = [_docker_cli(), "compose", "-f", str(compose_file), "config"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            raise DeployError(f"docker compose rejected {compose_file}:\n{_tail(proc.stderr, 15)}")
        return proc.stdout

    def compose_version(self) -> str:
        proc = subprocess.run([_docker_cli(), "compose", "version", "--short"], capture_output=True,
                              text=True, timeout=30)
        if proc.returncode != 0:
            raise EngineUnavailable("the docker compose v2 plugin is missing", hint=HOW_TO_GET_AN_ENGINE)
        return proc.stdout.strip()

    # -- releases --------------------------------------------------------------------------
    def releases(self, slot: str | None = None) -> list[Release]:
        filters = {"label": [f"{labels.MANAGED}=true", f"{labels.INSTANCE}={labels.instance()}"]
                   + ([f"{labels.SLOT}={slot}"] if slot else [])}
        found = [self._release(c) for c in self.client.containers.list(all=True, filters=filters)]
        return sorted(found, key=lambda r: (r.slot, r.release))

    def release(self, slot: str, number: int) -> Release | None:
        return next((r for r in self.releases(slot) if r.release == number), None)

    def refresh(self, release: Release) -> Release:
        try:
            return self._release(self.client.containers.get(release.container_id))
        except docker.errors.NotFound:
            raise DeployError(f"container {release.container_name} no longer exists") from None

    def _release(self, container: Any) -> Release:
        attrs = container.attrs
        state = attrs.get("State", {})
        lab = attrs.get("Config", {}).get("Labels", {}) or {}
        return Release(
            slot=lab.get(labels.SLOT, "?"),
            release=int(lab.get(labels.RELEASE, "0")),
            profile=lab.get(labels.PROFILE, "?"),
            image=lab.get(labels.IMAGE, attrs.get("Config", {}).get("Image", "?")),
            container_id=container.id,
            container_name=container.name,
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
        )

    def start(self, release: Release) -> None:
        self.client.containers.get(release.container_id).start()

    def stop(self, release: Release, timeout: int = 30) -> None:
        self.client.containers.get(release.container_id).stop(timeout=timeout)

    def remove(self, release: Release) -> None:
        self.client.containers.get(release.container_id).remove(force=True)

    def exit_code(self, release: Release) -> int | None:
        state = self.client.containers.get(release.container_id).attrs.get("State", {})
        return state.get("ExitCode")

    def logs_tail(self, release: Release, lines: int = 30) -> str:
        try:
            raw = self.client.containers.get(release.container_id).logs(tail=lines)
        except docker.errors.NotFound:
            return "(container is gone)"
        return raw.decode("utf-8", "replace").rstrip()

    # -- images ----------------------------------------------------------------------------
    def image(self, reference: str) -> Any | None:
        try:
            return self.client.images.get(reference)
        except docker.errors.ImageNotFound:
            return None

    def image_labels(self, reference: str) -> dict[str, str]:
        image = self.image(reference)
        return dict(image.labels or {}) if image is not None else {}


def _docker_cli() -> str:
    found = shutil.which("docker")
    if found is None:
        raise EngineUnavailable("the `docker` command is not on PATH", hint=HOW_TO_GET_AN_ENGINE)
    return found


def _short(exc: Exception) -> str:
    text = str(exc)
    return text if len(text) < 160 else text[:157] + "..."


def _tail(text: str, lines: int) -> str:
    return "\n".join("    " + line for line in (text or "").rstrip().splitlines()[-lines:])
