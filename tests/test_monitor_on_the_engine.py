"""`top` and `monitor` on the real engine: releases started by `up` on the CPU slot, the
monitor's scrape targets rewritten by the deploy executor at each start, stop and cut-over, so
Prometheus scrapes release 1, then release 2 after the upgrade, then release 1 after the
rollback; `top` finds the slot from the engine's labels and shows its figures under load."""

from __future__ import annotations

import json
import time

import httpx
from conftest import free_port, run_cli
from lifecycle_helpers import up
from monitor_helpers import Load

from deploytool.monitor.prometheus import HEALTH_JOB, RELEASES_JOB


def _scraped(api: httpx.Client, timeout: float = 60.0) -> list[tuple[str, str]]:
    """The releases Prometheus scrapes once their scrape is up: [(release, health)]."""
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        targets = api.get("/api/v1/targets").json()["data"]["activeTargets"]
        seen = [
            (t["labels"].get("release"), t["health"]) for t in targets if t["labels"]["job"] == RELEASES_JOB
        ]
        if seen and all(health == "up" for _, health in seen):
            return seen
        time.sleep(0.5)  # half the 1 s scrape interval
    return seen


def _wait_for(api: httpx.Client, release: str, timeout: float = 60.0) -> list[tuple[str, str]]:
    deadline = time.monotonic() + timeout
    seen = _scraped(api, timeout)
    while time.monotonic() < deadline and seen != [(release, "up")]:
        time.sleep(0.5)
        seen = _scraped(api, timeout=5)
    return seen


def test_top_and_monitor_follow_up_upgrade_and_rollback(slot_env) -> None:
    cli = slot_env
    port = free_port()
    monitor = run_cli(
        "monitor", "up", "--port", str(port), "--scrape-interval", "1", "--retention", "1d", "--json"
    )
    try:
        assert monitor.returncode == 0, monitor.stderr
        assert json.loads(monitor.stdout)["targets"] == []  # nothing serves yet
        api = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5)

        first = up(cli, "t-good")
        assert first.returncode == 0, first.stderr
        url = json.loads(first.stdout)["url"]
        assert _wait_for(api, "1") == [("1", "up")]

        with Load(url, clients=2):
            time.sleep(1)
            top = run_cli("top", "--once", "--interval", "2", "--json")
        assert top.returncode == 0, top.stderr
        # this instance's slot (top shows another instance's releases on the engine too)
        (server,) = [s for s in json.loads(top.stdout)["servers"] if s["name"] == "cpu"]
        assert (server["name"], server["release"], server["profile"], server["health"]) == (
            "cpu",
            1,
            "t-good",
            "healthy",
        )
        assert server["figures"]["why"] is None and server["figures"]["output_tps"] > 0

        second = up(cli, "t-good2")
        assert second.returncode == 0, second.stderr
        assert _wait_for(api, "2") == [("2", "up")]
        labels = next(
            t["labels"]
            for t in api.get("/api/v1/targets").json()["data"]["activeTargets"]
            if t["labels"]["job"] == RELEASES_JOB
        )
        assert (labels["slot"], labels["profile"], labels["card"]) == ("cpu", "t-good2", "cpu")

        back = cli("rollback", "--cpu", "--json")
        assert back.returncode == 0, back.stderr
        assert _wait_for(api, "1") == [("1", "up")]
        status = json.loads(run_cli("monitor", "status", "--json").stdout)
        assert status["running"] and sorted(
            (t["labels"]["job"], t["labels"]["release"]) for t in status["targets"]
        ) == [(HEALTH_JOB, "1"), (RELEASES_JOB, "1")]
    finally:
        run_cli("monitor", "down", "--json")
