"""The monitor for real: Debian's Prometheus built on the base image, run as its own compose
project, scraping the reference runtime under load on loopback; the targets file rewritten at a
cut-over moves the scrape to release 2; a release that stops fires its alert; the data volume
survives `monitor down`. Prometheus's own HTTP API is the witness."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import httpx
from conftest import free_port, run_cli
from monitor_helpers import Load
from sim_process import SimProcess

from deploytool.deploy import scrape_targets
from deploytool.host.releases import Release
from deploytool.monitor import prometheus, stack
from deploytool.profiles import ProfileStore
from deploytool.release.state import SlotPointers, write_pointers


def _release(number: int, url: str) -> Release:
    port = int(url.rsplit(":", 1)[1])
    return Release(
        slot="cpu",
        release=number,
        profile="sim",
        image="sim",
        container_id=f"c{number}",
        container_name=f"r{number}",
        state="running",
        health="healthy",
        host_port=port,
        gpus=[],
        simulator=True,
        created="",
    )


def _until(what: str, check, timeout: float = 90.0, every: float = 0.5):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(every)
    raise AssertionError(f"{what}: not within {timeout:g} s (last: {last!r})")


def _query(api: httpx.Client, expr: str) -> list[dict]:
    return api.get("/api/v1/query", params={"query": expr}).json()["data"]["result"]


def _targets(api: httpx.Client) -> list[dict]:
    """The /metrics targets (the same releases' /health are the health job's)."""
    return [
        t
        for t in api.get("/api/v1/targets").json()["data"]["activeTargets"]
        if t["labels"]["job"] == prometheus.RELEASES_JOB
    ]


def test_monitor_follows_the_release_and_keeps_its_data(docker_engine, tmp_path: Path) -> None:
    settings = stack.MonitorSettings(port=free_port(), retention="2d", scrape_interval_s=1)
    sim_flags = {
        "decode_tps": 200,
        "max_running_requests": 2,
        "enable_metrics": True,
        "spec_accept_length": 2.0,
        "default_chat_template_kwargs": '{"enable_thinking": false}',
    }
    try:
        with SimProcess(**sim_flags) as first, Load(first.url, clients=3):
            write_pointers("cpu", SlotPointers(current=1, previous=None))
            status = stack.up(settings, ProfileStore().all(), engine=docker_engine)
            assert status.running and status.settings["retention"] == "2d"
            scrape_targets.write_if_monitored([_release(1, first.url)])
            api = httpx.Client(base_url=status.url, timeout=5)
            _until(
                "release 1 scraped",
                lambda: [
                    t for t in _targets(api) if t["labels"].get("release") == "1" and t["health"] == "up"
                ],
            )
            # the recorded figures move under load
            rows = _until(
                "output tok/s recorded",
                lambda: [r for r in _query(api, "deploytool:output_tps") if float(r["value"][1]) > 0],
            )
            assert rows[0]["metric"]["slot"] == "cpu" and rows[0]["metric"]["profile"] == "sim"
            _until(
                "accept length recorded",
                lambda: [
                    r
                    for r in _query(api, "deploytool:spec_accept_length")
                    if abs(float(r["value"][1]) - 2.0) < 0.1
                ],
            )
            _until(
                "TTFT p99 recorded",
                lambda: [r for r in _query(api, "deploytool:ttft_p99_s") if float(r["value"][1]) > 0],
            )
            # every dashboard panel's query returns data from the live Prometheus
            board = json.loads((scrape_targets.monitor_dir() / "grafana-dashboard.json").read_text())
            for panel in board["panels"]:
                expr = panel["targets"][0]["expr"].replace("$slot", ".*")
                if panel["title"] not in (
                    "TPOT p50",
                    "TPOT p99",
                    "prefix hit rate",
                ):  # need finished/cached requests
                    _until(f"panel {panel['title']}", lambda expr=expr: _query(api, expr), timeout=30)

            with SimProcess(**sim_flags) as second, Load(second.url, clients=2):
                # the cut-over: release 2 serves, the pointer moves, the executor's hook rewrites
                write_pointers("cpu", SlotPointers(current=2, previous=1))
                scrape_targets.write_if_monitored([_release(1, first.url), _release(2, second.url)])
                _until(
                    "the scrape moved to release 2",
                    lambda: (
                        [t["labels"].get("release") for t in _targets(api)] == ["2"]
                        and _targets(api)[0]["health"] == "up"
                    ),
                )
                _until(
                    "release 2's figures",
                    lambda: [
                        r
                        for r in _query(api, 'deploytool:output_tps{release="2"}')
                        if float(r["value"][1]) > 0
                    ],
                )
            # release 2 stopped behind deploytool's back: its alert starts (pending for its minute)
            _until(
                "release down alert",
                lambda: [
                    a
                    for a in api.get("/api/v1/alerts").json()["data"]["alerts"]
                    if a["labels"]["alertname"] == "DeploytoolReleaseDown"
                    and a["labels"].get("release") == "2"
                ],
                timeout=60,
            )
        shown = run_cli("monitor", "status", "--json")
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["running"] is True

        down = stack.down(engine=docker_engine)
        assert not down.running and docker_engine.volume_exists(stack.volume_name())
        again = stack.up(settings, [], engine=docker_engine)
        api = httpx.Client(base_url=again.url, timeout=5)
        kept = _until(
            "release 1's series after down and up",
            lambda: _query(api, 'sum(max_over_time(sglang:num_requests_total{release="1"}[1h]))'),
            timeout=60,
        )
        assert float(kept[0]["value"][1]) > 0
    finally:
        stack.down(engine=docker_engine)
        with contextlib.suppress(Exception):
            docker_engine.client.volumes.get(stack.volume_name()).remove(force=True)
