"""The monitor on a host that is not kind to it, with Debian's Prometheus for real: files
written under umask 077 stay readable by Prometheus's own user in its container (a cut-over
still moves the scrape), and its lifecycle endpoint is closed, so a web page in the operator's
browser cannot stop or reload it; `monitor up` reloads it through the engine instead."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml
from conftest import ROOT, free_port, run_cli

from deploytool.deploy import scrape_targets
from deploytool.host import labels
from deploytool.monitor import stack
from deploytool.monitor.prometheus import RELEASES_JOB


def _strict_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The console script as a person with umask 077 runs it (a fresh interpreter: the umask is
    the process's own)."""
    return subprocess.run(
        [sys.executable, "-m", "deploytool", *args],
        cwd=ROOT,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=300,
        umask=0o077,
    )


def _scraped(api: httpx.Client) -> list[tuple[str | None, str]]:
    targets = api.get("/api/v1/targets").json()["data"]["activeTargets"]
    return [(t["labels"].get("release"), t["health"]) for t in targets if t["labels"]["job"] == RELEASES_JOB]


def _until(what: str, check, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.5)  # half the 1 s scrape interval
    raise AssertionError(f"{what}: not within {timeout:g} s (last: {last!r})")


def test_a_cut_over_under_umask_077_moves_the_scrape(slot_env, profiles_dir: Path) -> None:
    port, release_port = free_port(), slot_env.port
    monitor = _strict_cli("monitor", "up", "--port", str(port), "--scrape-interval", "1", "--json")
    try:
        assert monitor.returncode == 0, monitor.stderr
        api = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5)
        for profile, release in (("t-good", "1"), ("t-good2", "2")):
            started = _strict_cli(
                "up",
                "--cpu",
                "--profile",
                profile,
                "--skip-qualify",
                "--json",
                "--profiles-dir",
                str(profiles_dir),
                "--port",
                str(release_port),
            )
            assert started.returncode == 0, started.stderr
            # Prometheus's own user read the file deploytool rewrote at the start (the cut-over)
            _until(
                f"Prometheus scrapes release {release} alone",
                lambda release=release: _scraped(api) == [(release, "up")],
            )
            assert scrape_targets.targets_file().stat().st_mode & 0o777 == 0o644
    finally:
        run_cli("monitor", "down", "--json")


def test_the_lifecycle_endpoint_is_closed_and_monitor_up_reloads_by_signal(docker_engine) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    first = run_cli("monitor", "up", "--port", str(port), "--scrape-interval", "1", "--json")
    try:
        assert first.returncode == 0, first.stderr
        (container,) = docker_engine.client.containers.list(
            filters={"label": [f"{labels.INSTANCE}={labels.instance()}", f"{stack.MONITOR_LABEL}=prometheus"]}
        )
        started_at = container.attrs["State"]["StartedAt"]
        # what a web page in the operator's browser could send: a cross-origin form POST
        page = {"Origin": "http://evil.example", "Content-Type": "application/x-www-form-urlencoded"}
        for path in ("/-/quit", "/-/reload"):
            answer = httpx.post(url + path, headers=page, timeout=5)
            assert answer.status_code in (403, 404, 405), (path, answer.status_code, answer.text)
        time.sleep(2)
        assert httpx.get(url + "/-/ready", timeout=5).status_code == 200
        container.reload()
        assert container.status == "running" and container.attrs["RestartCount"] == 0

        def interval() -> str:
            config = httpx.get(url + "/api/v1/status/config", timeout=5).json()["data"]["yaml"]
            return str(yaml.safe_load(config)["global"]["scrape_interval"])

        assert interval() == "1s"
        # the same compose document (the port and retention unchanged): compose leaves the
        # container running, and `monitor up` makes it read the new configuration by SIGHUP
        again = run_cli("monitor", "up", "--port", str(port), "--scrape-interval", "3", "--json")
        assert again.returncode == 0, again.stderr
        assert interval() == "3s"
        container.reload()
        assert container.attrs["State"]["StartedAt"] == started_at  # reloaded, not restarted
    finally:
        run_cli("monitor", "down", "--json")
