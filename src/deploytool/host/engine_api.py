"""The Docker engine's HTTP API read directly, for the command that only looks (`status`).

engine.py is the door to Docker for everything that acts (start, stop, build, compose): the
Docker SDK. Importing the SDK alone costs about a tenth of a second of CPU, more than all the
rest of `deploytool status`; listing deploytool's containers needs two plain GET requests
(GET /containers/json, then GET /containers/{id}/json per container, as the SDK's
containers.list does), which the standard library makes over the engine's socket.

Only the addresses the SDK would reach without TLS are read here: DOCKER_HOST unset (the
default socket), unix://PATH or tcp://HOST:PORT. Any other (TLS, ssh://) returns None and the
caller takes the SDK's way.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit

from ..errors import DeployError, EngineUnavailable
from . import labels
from .releases import Release, release_from_inspect

HOW_TO_GET_AN_ENGINE = (
    "start a Docker Engine >= 25 with the compose v2 plugin (on Debian as root: "
    "`.ci/docker-engine.sh install && .ci/docker-engine.sh start`; see docs/install.md)"
)
DEFAULT_SOCKET = "/var/run/docker.sock"
TIMEOUT_S = 30.0


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def connection(
    env: dict[str, str] | None = None, timeout: float = TIMEOUT_S
) -> http.client.HTTPConnection | None:
    """A connection to the engine DOCKER_HOST names, or None when it is not a plain one."""
    environ: Mapping[str, str] = os.environ if env is None else env
    if environ.get("DOCKER_TLS_VERIFY"):
        return None
    address = environ.get("DOCKER_HOST") or f"unix://{DEFAULT_SOCKET}"
    parts = urlsplit(address)
    if parts.scheme == "unix":
        return _UnixConnection(parts.path or DEFAULT_SOCKET, timeout)
    if parts.scheme in ("tcp", "http") and parts.hostname:
        return http.client.HTTPConnection(parts.hostname, parts.port or 2375, timeout=timeout)
    return None


def get_json(conn: http.client.HTTPConnection, path: str) -> Any:
    """GET one API path; the engine's own message when it refuses, EngineUnavailable when nothing
    answers (the same words as the SDK's way)."""
    try:
        conn.request("GET", path, headers={"Host": "docker"})
        response = conn.getresponse()
        body = response.read()
    except OSError as exc:
        raise EngineUnavailable(
            f"no Docker engine is reachable ({type(exc).__name__}: {exc})",
            hint=HOW_TO_GET_AN_ENGINE,
            reason=f"{type(exc).__name__}: {exc}",
        ) from None
    except http.client.HTTPException as exc:
        raise EngineUnavailable(
            f"the Docker engine answered something that is not HTTP ({exc!r})", hint=HOW_TO_GET_AN_ENGINE
        ) from None
    if response.status == 404:
        return None
    data = json.loads(body) if body else None
    if response.status >= 400:
        message = data.get("message") if isinstance(data, dict) else body[:300].decode("utf-8", "replace")
        raise DeployError(f"the Docker engine refused: {message}", hint="see `deploytool doctor`")
    return data


def read_releases(
    slot: str | None = None, env: dict[str, str] | None = None, *, every_instance: bool = False
) -> list[Release] | None:
    """This instance's releases (of one slot, or all), as Engine.releases() reads them, or with
    `every_instance` every deploytool's on the engine (`top` shows the whole host); None when
    DOCKER_HOST is not an address read here (then use Engine)."""
    conn = connection(env)
    if conn is None:
        return None
    mine = [] if every_instance else [f"{labels.INSTANCE}={labels.instance()}"]
    filters = {"label": [f"{labels.MANAGED}=true", *mine] + ([f"{labels.SLOT}={slot}"] if slot else [])}
    try:
        listed = get_json(conn, "/containers/json?all=1&filters=" + quote(json.dumps(filters))) or []
        found = []
        for summary in listed:
            attrs = get_json(conn, f"/containers/{summary['Id']}/json")
            if attrs is not None:  # None: removed between the two requests
                found.append(release_from_inspect(attrs))
    finally:
        conn.close()
    return sorted(found, key=lambda r: (r.slot, r.release))
