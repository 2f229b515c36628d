"""Run `deploytool watch` unattended: a compose service or a systemd unit, rendered from data.

Both need the same access: the Docker engine's socket (read-write: watch stops, starts and
rolls back containers, which is root on that host in effect), deploytool's state directory
(read-write: the pointers say which release serves; the journal is appended), and the hooks
folder when hooks are used. docs/watch.md says which to choose.
"""

from __future__ import annotations

import configparser
import io
import shlex
import sys
from pathlib import Path
from typing import Any

from ..host.labels import instance
from ..release.compose import escape_interpolation
from ..release.state import home
from ..yamlio import dump_yaml

SOCKET = "/var/run/docker.sock"
STATE_IN_CONTAINER = "/var/lib/deploytool"
HOOKS_IN_CONTAINER = "/etc/deploytool/hooks"


def watch_compose(
    image: str, *, state_dir: Path | None = None, hooks_dir: Path | None = None
) -> dict[str, Any]:
    """A compose project with one service: deploytool watch in `image`, the engine socket and
    the state directory mounted, restarted by the engine unless stopped."""
    state_dir = state_dir or home()
    environment = {"DEPLOYTOOL_HOME": STATE_IN_CONTAINER}
    if instance() != "default":
        environment["DEPLOYTOOL_INSTANCE"] = instance()
    volumes: list[dict[str, Any]] = [
        {"type": "bind", "source": SOCKET, "target": SOCKET},  # read-write: watch restarts containers
        {"type": "bind", "source": str(state_dir), "target": STATE_IN_CONTAINER},
    ]
    command = ["deploytool", "watch"]
    if hooks_dir is not None:
        volumes.append(
            {"type": "bind", "source": str(hooks_dir), "target": HOOKS_IN_CONTAINER, "read_only": True}
        )
        command += ["--hooks", HOOKS_IN_CONTAINER]
    # compose would fill a `$` in a path from its environment: every value literal (`$$`)
    return escape_interpolation(
        {
            "name": "deploytool-watch",
            "services": {
                "watch": {
                    "image": image,
                    "command": command,
                    "restart": "unless-stopped",
                    # Releases publish on the host's loopback: the probe must come from the host's network.
                    "network_mode": "host",
                    "environment": environment,
                    "volumes": volumes,
                    "labels": {"io.deploytool.role": "watch"},
                }
            },
        }
    )


def watch_compose_text(image: str, **kwargs: Any) -> str:
    return "# Rendered by `deploytool watch --render compose`: docs/watch.md\n" + dump_yaml(
        watch_compose(image, **kwargs)
    )


def watch_systemd_unit(
    *,
    executable: str | None = None,
    state_dir: Path | None = None,
    hooks_dir: Path | None = None,
    user: str | None = None,
) -> str:
    """A systemd service running the host's deploytool; `Restart=always` brings it back."""
    if executable is None:  # the deploytool that renders the unit is the one that will run it
        executable = (
            str(Path(sys.argv[0]).resolve())
            if sys.argv and sys.argv[0].endswith("deploytool")
            else "/usr/local/bin/deploytool"
        )
    state_dir = state_dir or home()
    command = [executable, "watch"] + (["--hooks", str(hooks_dir)] if hooks_dir else [])
    unit = configparser.ConfigParser(interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys are case-sensitive
    unit["Unit"] = {
        "Description": "deploytool watch: restart unhealthy releases, roll back crash loops",
        "After": "docker.service",
        "Requires": "docker.service",
    }
    service = {
        "Type": "simple",
        "ExecStart": shlex.join(command),
        "Restart": "always",
        "RestartSec": "10",
        "Environment": f"DEPLOYTOOL_HOME={state_dir}",
    }
    if instance() != "default":
        service["Environment"] += f" DEPLOYTOOL_INSTANCE={instance()}"
    if user:
        service["User"] = user
        service["SupplementaryGroups"] = "docker"  # the engine socket's group
    unit["Service"] = service
    unit["Install"] = {"WantedBy": "multi-user.target"}
    out = io.StringIO()
    unit.write(out, space_around_delimiters=False)
    return "# Rendered by `deploytool watch --render systemd`: docs/watch.md\n" + out.getvalue()
