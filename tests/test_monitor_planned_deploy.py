"""A planned deploy pages for nothing: the new release joins the monitor's scrape targets once
its health check passed, not while it loads. With the real Prometheus scraping every second and
the shipped rules (their own `for:`, nothing shortened), an `up` to a release that refuses
connections while it "loads" its weights and answers 503 while it warms up leaves no failed
scrape of it and no alert of it, pending or firing, over the whole deploy: an alert whose
expression was never true cannot fire after any `for:`, which is why the test need not wait
the rule's minute.
A release once listed stays listed while it runs, so a real failure still pages
(tests/test_monitor_live.py stops one behind deploytool's back and sees DeploytoolReleaseDown)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from conftest import free_port, run_cli
from lifecycle_helpers import PROFILES, up

from deploytool.deploy import scrape_targets
from deploytool.host.releases import Release
from deploytool.monitor.prometheus import HEALTH_JOB, RELEASES_JOB

# connections refused this long, then /health 503 for the warm-up, as SGLang loads: several of
# the 1 s scrapes and of the rules' evaluations fall in each
LOAD_S = 4
WARMUP_S = 2


def _release(number: int, health: str | None, state: str = "running") -> Release:
    return Release(
        slot="cpu",
        release=number,
        profile="p",
        image="i",
        container_id=f"c{number}",
        container_name=f"n{number}",
        state=state,
        health=health,
        host_port=30000 + number,
        gpus=[],
        simulator=True,
        created="",
    )


def test_a_release_joins_the_targets_once_healthy_and_stays_while_it_runs() -> None:
    listed = lambda groups: [(g["labels"]["slot"], g["labels"]["release"]) for g in groups]  # noqa: E731
    assert listed(scrape_targets.target_groups([_release(2, "starting")])) == []  # loading: not yet
    assert listed(scrape_targets.target_groups([_release(2, "healthy")])) == [("cpu", "2")]
    # once listed it stays, whatever its health, so a serving release that fails pages
    for health in ("unhealthy", "starting"):
        assert listed(scrape_targets.target_groups([_release(2, health)], {("cpu", 2)})) == [("cpu", "2")]
    assert listed(
        scrape_targets.target_groups([_release(2, "restarting", state="restarting")], {("cpu", 2)})
    ) == [("cpu", "2")]
    assert listed(scrape_targets.target_groups([_release(2, "healthy", state="exited")], {("cpu", 2)})) == []


@pytest.fixture
def profiles_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "t-good.yaml").write_text(PROFILES["t-good"])
    (folder / "t-slow.yaml").write_text(
        f"name: t-slow\nextends: t-good\nserver:\n  args:\n    load-seconds: {LOAD_S}\n"
        f"    startup-seconds: {WARMUP_S}\n"
    )
    return folder


def _samples(api: httpx.Client, query: str, since: float, until: float) -> list[tuple[dict, float, str]]:
    span = int(until - since) + 5
    body = api.get("/api/v1/query", params={"query": f"{query}[{span}s]", "time": f"{until:.3f}"}).json()
    return [
        (s["metric"], float(t), v)
        for s in body["data"]["result"]
        for t, v in s["values"]
        if since <= float(t) <= until
    ]


def test_an_up_to_a_slow_release_pages_for_nothing(slot_env) -> None:
    port = free_port()
    monitor = run_cli(
        "monitor", "up", "--port", str(port), "--scrape-interval", "1", "--retention", "1d", "--json"
    )
    api = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5)
    try:
        assert monitor.returncode == 0, monitor.stderr
        first = up(slot_env, "t-good")
        assert first.returncode == 0, first.stderr

        def scraped():
            return sorted(
                (t["labels"]["job"], t["labels"]["release"], t["health"])
                for t in api.get("/api/v1/targets").json()["data"]["activeTargets"]
            )

        _until(lambda: scraped() == [(HEALTH_JOB, "1", "up"), (RELEASES_JOB, "1", "up")], "release 1 scraped")

        since = time.time()
        second = up(slot_env, "t-slow")
        assert second.returncode == 0, second.stderr
        _until(lambda: scraped() == [(HEALTH_JOB, "2", "up"), (RELEASES_JOB, "2", "up")], "release 2 scraped")
        time.sleep(3)  # a few more evaluations of the rules after the cut-over
        until = time.time()

        ups = _samples(api, f'up{{job=~"{RELEASES_JOB}|{HEALTH_JOB}"}}', since, until)
        first_up = min(t for m, t, v in ups if m["release"] == "2" and v == "1")
        assert first_up - since >= LOAD_S + WARMUP_S  # the release really was slow to answer
        assert {m["release"] for m, _, _ in ups} == {"1", "2"}  # scraped before and after the hand-over
        # the slow release: not one failed scrape while it loaded and warmed up, no alert of its own
        assert [(m["job"], t) for m, t, v in ups if m["release"] == "2" and v != "1"] == []
        alerts = _samples(api, 'ALERTS{alertname=~"DeploytoolRelease.*"}', since, until)
        assert [(m["alertstate"], t) for m, t, _ in alerts if m["release"] == "2"] == []
        # the release handed over from leaves the file as it stops; Prometheus applies a changed
        # file within its discovery's few seconds, so its last scrapes may fail for that long:
        # pending at most, far from the rule's minute, never firing
        failed = sorted(t for m, t, v in ups if m["release"] == "1" and v != "1")
        assert not failed or failed[-1] - failed[0] < 15, failed
        assert [(m["alertname"], t) for m, t, _ in alerts if m["alertstate"] == "firing"] == []
    finally:
        run_cli("monitor", "down", "--json")


def _until(check, what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (httpx.HTTPError, KeyError, ValueError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout:g} s")
