"""`deploytool monitor up|down|status`: a Prometheus of its own compose project, built from
Debian's `prometheus` package on the local base image, scraping what serves on this host.

The image needs no registry: the .deb files are fetched on the host (`apt-get download`, the
host's own package index) into the build context, and apt inside the build installs them from
the files alone, since a build step cannot reach a package index. Prometheus runs on the host's
network (the releases publish on loopback) and listens on 127.0.0.1 only. Its data lives in a
named volume that `monitor down` keeps; retention is set in the configuration (--retention).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..deploy import scrape_targets
from ..errors import DeployError, FieldError
from ..files import write_atomic
from ..host.labels import INSTANCE, PREFIX, instance, name_prefix
from ..release.state import cache_dir
from . import prometheus

BASE_IMAGE = "deploytool/base:bookworm"
MONITOR_LABEL = f"{PREFIX}.monitor"  # on the monitor's container and volume: not a release
# Debian bookworm's prometheus and what it needs beyond the base image (its web UI's scripts).
DEBS = (
    "prometheus",
    "fonts-glyphicons-halflings",
    "javascript-common",
    "libjs-bootstrap",
    "libjs-bootstrap4",
    "libjs-d3",
    "libjs-eonasdan-bootstrap-datetimepicker",
    "libjs-jquery",
    "libjs-jquery-hotkeys",
    "libjs-moment",
    "libjs-moment-timezone",
    "libjs-mustache",
    "libjs-popper.js",
    "libjs-rickshaw",
)
DOCKERFILE = f"""\
FROM {BASE_IMAGE}
COPY debs/ /opt/debs/
# The files alone: a build step reaches no package index.
RUN apt-get install -y --no-install-recommends /opt/debs/*.deb \\
 && rm -rf /opt/debs \\
 && mkdir -p /prometheus && chown prometheus:prometheus /prometheus \\
 && prometheus --version && promtool --version
USER prometheus
WORKDIR /prometheus
ENTRYPOINT ["/usr/bin/prometheus"]
"""
IN_CONTAINER = "/etc/deploytool-monitor"


@dataclass
class MonitorSettings:
    port: int = 9090
    retention: str = "15d"  # Prometheus's own default, written down so it is a choice
    scrape_interval_s: int = 5
    cards_exporter: str | None = None  # HOST:PORT of NVIDIA's dcgm-exporter, when one runs

    def check(self) -> None:
        import re

        if not 1 <= self.port <= 65535:
            raise FieldError("port", "is not a TCP port", value=str(self.port))
        if not re.fullmatch(r"(\d+(y|w|d|h|m|s|ms))+", self.retention):
            raise FieldError(
                "retention",
                "is not a Prometheus duration",
                value=repr(self.retention),
                hint="e.g. 15d, 12h, 1y",
            )
        if self.cards_exporter and not re.fullmatch(r"[A-Za-z0-9.\-]+:\d{1,5}", self.cards_exporter):
            raise FieldError("cards_exporter", "is not HOST:PORT", value=repr(self.cards_exporter))


@dataclass
class MonitorStatus:
    running: bool
    url: str | None
    settings: dict[str, Any] | None
    volume: str
    targets: list[dict[str, Any]] = field(default_factory=list)
    alerts: list[dict[str, Any]] = field(default_factory=list)
    why: str | None = None


def project() -> str:
    return f"{name_prefix()}-monitor"


def volume_name() -> str:
    return f"{name_prefix()}-monitor-data"


def write_files(settings: MonitorSettings, profiles: list[Any]) -> Path:
    """Everything Prometheus reads, in the monitor's folder (mounted read-only in its container)."""
    folder = scrape_targets.monitor_dir()
    folder.mkdir(parents=True, exist_ok=True)
    scrape_targets.write_targets()
    files = {
        "prometheus.yml": yaml.safe_dump(
            prometheus.config(
                scrape_interval_s=settings.scrape_interval_s,
                targets_path=f"{IN_CONTAINER}/targets/releases.json",
                rules_path=f"{IN_CONTAINER}/rules.yml",
                cards_exporter=settings.cards_exporter,
            ),
            sort_keys=False,
        ),
        "rules.yml": yaml.safe_dump(prometheus.rules_document(profiles), sort_keys=False, width=1000),
        "grafana-dashboard.json": json.dumps(prometheus.dashboard(), indent=2) + "\n",
        "settings.json": json.dumps(asdict(settings), indent=2) + "\n",
    }
    # Prometheus runs as its own user in the container: the files hold no secret, it must read
    # them whatever the umask of whoever wrote them (the targets file likewise, at each cut-over).
    for name, text in files.items():
        write_atomic(folder / name, text, mode=scrape_targets.READABLE)
    for path in [folder, folder / "targets"]:
        os.chmod(path, 0o755)  # nosec B103: folders Prometheus's user must enter; they hold no secret
    return folder


def compose_document(settings: MonitorSettings, image: str, folder: Path) -> dict[str, Any]:
    # Not `managed`: that label makes a container a release to status, top and the targets.
    labels = {INSTANCE: instance(), MONITOR_LABEL: "prometheus"}
    return {
        "name": project(),
        "services": {
            "prometheus": {
                "image": image,
                "network_mode": "host",  # the releases publish on the host's loopback
                "command": [
                    f"--config.file={IN_CONTAINER}/prometheus.yml",
                    "--storage.tsdb.path=/prometheus",
                    f"--storage.tsdb.retention.time={settings.retention}",
                    # no --web.enable-lifecycle: its /-/quit and /-/reload take a POST from
                    # anyone who reaches the port (a web page in the operator's browser
                    # among them); `monitor up` reloads by SIGHUP through the engine
                    f"--web.listen-address=127.0.0.1:{settings.port}",
                ],
                "volumes": [f"{folder}:{IN_CONTAINER}:ro", "data:/prometheus"],
                "labels": labels,
                "restart": "unless-stopped",
            }
        },
        # a named volume: `compose down` (never with -v here) and upgrades keep it
        "volumes": {"data": {"name": volume_name(), "labels": labels}},
    }


def fetch_debs(context: Path) -> None:
    """Debian's packages into the build context, from the host's package index."""
    debs = context / "debs"
    if debs.is_dir() and any(debs.glob("prometheus_*.deb")):
        return
    debs.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.run(
            ["apt-get", "download", *DEBS],
            cwd=debs,
            capture_output=True,
            text=True,  # nosec B607: apt-get from PATH, as the person runs it; argv, no shell
            timeout=600,
        )
    except FileNotFoundError:
        raise DeployError(
            "apt-get is not on this host: the monitor's image is built from Debian's packages",
            hint=f"put the .deb files of {' '.join(DEBS)} in {debs}",
        ) from None
    if proc.returncode != 0:
        raise DeployError(
            f"apt-get download failed:\n{proc.stderr[-2000:]}",
            hint=f"run `apt-get update`, or put the .deb files in {debs}",
        )


def build_image(engine: Any) -> str:
    context = cache_dir("monitor-image")
    fetch_debs(context)
    write_atomic(context / "Dockerfile", DOCKERFILE)
    digest = hashlib.sha256(DOCKERFILE.encode())
    for deb in sorted((context / "debs").glob("*.deb")):
        digest.update(deb.name.encode())
    tag = f"deploytool/monitor:prometheus-{digest.hexdigest()[:12]}"
    if engine.image(tag) is not None:
        return tag
    for event in engine.build_events(context, tag=tag, labels={MONITOR_LABEL: "prometheus"}, no_cache=False):
        if "error" in event:
            raise DeployError(f"the monitor's image did not build: {event['error']}")
    return tag


def up(
    settings: MonitorSettings, profiles: list[Any], engine: Any = None, ready_timeout_s: float = 120
) -> MonitorStatus:
    from ..host.engine import Engine

    settings.check()
    engine = engine or Engine()
    image = build_image(engine)
    folder = write_files(settings, profiles)
    compose_file = folder / "compose.yaml"
    write_atomic(compose_file, yaml.safe_dump(compose_document(settings, image, folder), sort_keys=False))
    engine.compose(project(), compose_file, "up", "-d", "--remove-orphans")
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:
        current = status()
        if current.running:
            # a container compose left running (its compose document unchanged) still holds the
            # configuration and rules it read at its start: it reads the files written above now
            reload(engine, compose_file, settings.port, timeout=max(5.0, deadline - time.monotonic()))
            return status()
        time.sleep(1)
    raise DeployError(
        f"Prometheus did not become ready on 127.0.0.1:{settings.port} within {ready_timeout_s:g} s",
        hint=f"`docker compose -p {project()} logs` shows why",
    )


def reload(engine: Any, compose_file: Path, port: int, timeout: float = 30) -> None:
    """Prometheus re-reads its configuration and rules on SIGHUP, sent through the engine (only
    the engine's users can); waits for its own figures to say the reload happened and held."""
    sent = time.time()
    engine.compose(project(), compose_file, "kill", "-s", "SIGHUP", "prometheus")
    deadline = time.monotonic() + timeout
    figures: dict[str, float] = {}
    while time.monotonic() < deadline:
        figures = _reload_figures(port)
        # the figure is whole seconds in some versions: a reload in the second of the signal counts
        if figures.get("prometheus_config_last_reload_success_timestamp_seconds", 0) >= int(sent):
            break
        if figures.get("prometheus_config_last_reload_successful") == 0:
            break
        time.sleep(0.5)
    if figures.get("prometheus_config_last_reload_successful") != 1:
        raise DeployError(
            f"Prometheus did not take the configuration in {compose_file.parent} on SIGHUP "
            f"(its figures: {figures or 'none'})",
            hint=f"`docker compose -p {project()} logs` shows why",
        )


def _reload_figures(port: int) -> dict[str, float]:
    """Prometheus's own reload figures from its /metrics (empty while it does not answer)."""
    import asyncio

    from ..server.client import EndpointClient
    from ..server.facts import parse_prometheus

    async def read() -> str:
        async with EndpointClient(f"http://127.0.0.1:{port}", timeout=3, max_connections=1) as client:
            return (await client.get("/metrics", timeout=3)).text

    wanted = (
        "prometheus_config_last_reload_successful",
        "prometheus_config_last_reload_success_timestamp_seconds",
    )
    try:
        text = asyncio.run(read())
    except Exception:
        return {}
    return {name: value for name, value in parse_prometheus(text).items() if name in wanted}


@dataclass
class MonitorDown:
    """What `monitor down` did: a clean stop is `stopped`, not "not running (ConnectError)"."""

    stopped: bool  # Prometheus answered before, and its compose project is down now
    volume: str
    volume_removed: bool  # --volumes: its data volume went too
    running: bool = False  # Prometheus still answers after the stop (it should not)
    why: str | None = None  # why there was nothing to stop, or what still answers

    def line(self) -> str:
        data = (
            f"data volume {self.volume} removed"
            if self.volume_removed
            else f"data volume {self.volume} kept for the next `monitor up` (`monitor down --volumes` removes it)"
        )
        if self.running:
            return f"monitor: still answering after the stop ({self.why}); {data}"
        return f"monitor: {'stopped' if self.stopped else f'nothing to stop ({self.why})'}; {data}"


def down(engine: Any = None, *, volumes: bool = False) -> MonitorDown:
    """Stop the monitor's compose project; with `volumes`, remove its data volume too."""
    from ..host.engine import Engine

    before = status()
    compose_file = scrape_targets.monitor_dir() / "compose.yaml"
    engine = engine or Engine()
    if compose_file.exists():  # also when it was not answering: a crashed container goes all the same
        engine.compose(project(), compose_file, "down")  # without -v: the volume goes only when asked, below
    removed = False
    if volumes and engine.volume_exists(volume_name()):
        engine.remove_volume(volume_name())
        removed = True
    after = status() if before.running else before
    why = (
        f"{after.url} still answers"
        if after.running
        else (None if before.running else f"it was not running: {before.why}")
    )
    return MonitorDown(before.running, volume_name(), removed, running=after.running, why=why)


def status(timeout: float = 3.0) -> MonitorStatus:
    import asyncio

    folder = scrape_targets.monitor_dir()
    try:
        settings = json.loads((folder / "settings.json").read_text())
    except (OSError, ValueError):
        return MonitorStatus(False, None, None, volume_name(), why="never set up (`deploytool monitor up`)")
    return asyncio.run(_ask(settings, timeout))


async def _ask(settings: dict[str, Any], timeout: float) -> MonitorStatus:
    """Prometheus's own API, through the one HTTP client (server/)."""
    from ..server.client import EndpointClient

    url = f"http://127.0.0.1:{settings['port']}"
    try:
        async with EndpointClient(url, timeout=timeout, max_connections=2) as client:
            if (await client.get("/-/ready", timeout=timeout)).status_code != 200:
                return MonitorStatus(False, url, settings, volume_name(), why="not ready")
            targets = (await client.get("/api/v1/targets", timeout=timeout)).json()["data"]["activeTargets"]
            alerts = (await client.get("/api/v1/alerts", timeout=timeout)).json()["data"]["alerts"]
    except (ValueError, KeyError, TypeError) as exc:
        return MonitorStatus(
            False, url, settings, volume_name(), why=f"not Prometheus's answer: {type(exc).__name__}"
        )
    except Exception as exc:
        return MonitorStatus(False, url, settings, volume_name(), why=f"not answering: {type(exc).__name__}")
    return MonitorStatus(
        True,
        url,
        settings,
        volume_name(),
        targets=[
            {
                "url": t.get("scrapeUrl"),
                "health": t.get("health"),
                "error": t.get("lastError") or None,
                "labels": {
                    k: v
                    for k, v in (t.get("labels") or {}).items()
                    if k in ("slot", "release", "profile", "card", "job")
                },
            }
            for t in targets
        ],
        alerts=[
            {
                "name": a.get("labels", {}).get("alertname"),
                "state": a.get("state"),
                "slot": a.get("labels", {}).get("slot"),
            }
            for a in alerts
        ],
    )
