"""The monitor against real releases on the real engine, a real Prometheus and a real browser.

A release started by `up` with an API key (a canary value found nowhere else) on the CPU slot:
it refuses its API without the key, yet Prometheus scrapes it up without any key, because SGLang
serves /metrics, /health and /ready without one by design (utils/auth.py, read in the tests of
test_api_key_access.py, and the reference runtime does the same), so no key is handed to
Prometheus at all. Headless Chromium reads Prometheus's own targets page (the /metrics and
/health targets up with the slot's labels). An upgrade to release 2 moves the scrape; the gap
Prometheus's own `up` samples show is printed (a figure, docs/measured/monitor-scrape-gap.md, not
a gate). Then two faults, each caught by its shipped rule with its shipped `for:`: release 2's
/health turns 503 while it runs on (the reference runtime's health_fail_after, SGLang's answer
for a wedged scheduler): DeploytoolReleaseUnhealthy pending, then firing, in Prometheus's alerts
API and on its alerts page; then its container stopped behind deploytool's back:
DeploytoolReleaseDown pending, and the unhealthy alert gone (one page per fault). The canary is then
searched in every monitor file, Prometheus's config, targets, series and alerts as its API
answers them, its container's logs and inspect, `monitor status --json`, and both pages' DOM.
UPDATE_DOC_SCREENSHOTS=1 copies the two pages' screenshots into docs/.
"""

from __future__ import annotations

import json
import os
import secrets as stdlib_secrets
import shutil
import time
from pathlib import Path

import httpx
import pytest
import yaml
from browser_helpers import CHROMIUM, Browser
from conftest import free_port, run_cli
from lifecycle_helpers import PROFILES, up
from monitor_helpers import serving_gap

from deploytool.deploy import scrape_targets
from deploytool.host import labels
from deploytool.monitor import stack
from deploytool.monitor.prometheus import HEALTH_JOB, RELEASES_JOB

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine (apt-get install chromium)"),
]

KEY = "CANARYKEY" + stdlib_secrets.token_hex(10)
# release 2's /health turns 503 this long after its start-up: `up` is done by then (it needs the
# engine's first healthy probe, a second or two, then the cut-over: 2 s on a machine loaded 7 deep)
HEALTH_FAILS_AFTER_S = 10
DOCS = Path(__file__).resolve().parents[1] / "docs"
TARGETS_DOM = """[...document.querySelectorAll('tbody tr')].filter(tr => tr.querySelector('td.endpoint')).map(tr => ({
  endpoint: tr.querySelector('td.endpoint').innerText.trim(), state: tr.querySelector('td.state').textContent.trim().toLowerCase(),
  labels: [...tr.querySelectorAll('td.labels .badge')].map(b => b.innerText.trim())}))"""
ALERTS_DOM = """({rules: [...document.querySelectorAll('tr.alert_header b')].map(b => b.innerText.trim()),
  active: [...document.querySelectorAll('table.alert_elements_table tr')].filter(tr => tr.querySelector('.state_indicator')).map(tr => ({
    labels: [...tr.querySelectorAll('.badge')].map(b => b.innerText.trim()),
    state: tr.querySelector('.state_indicator').textContent.trim().toLowerCase()}))})"""


@pytest.fixture
def profiles_dir(tmp_path: Path) -> Path:
    """lifecycle_helpers' fast reference runtime, with a key from a 0600 file (slot_env uses this)."""
    folder = tmp_path / "profiles"
    folder.mkdir()
    key_file = tmp_path / "api-key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)
    (folder / "t-good.yaml").write_text(PROFILES["t-good"])
    (folder / "t34-keyed.yaml").write_text(
        f"name: t34-keyed\nextends: t-good\nserver:\n  api_key: {{file: {key_file}}}\n"
    )
    (folder / "t34-keyed2.yaml").write_text(
        "name: t34-keyed2\nextends: t34-keyed\nserver:\n  args:\n    decode-tps: 3000\n"
        f"  env: {{DEPLOYTOOL_SIM_FAULT: health_fail_after={HEALTH_FAILS_AFTER_S}}}\n"
    )
    return folder


def _until(what: str, check, timeout: float = 90.0):
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (httpx.HTTPError, KeyError, IndexError, ValueError, RuntimeError) as exc:
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.5)  # half the 1 s scrape and evaluation interval
    raise AssertionError(f"{what}: not within {timeout:g} s (last: {last!r})")


def _page(browser: Browser, url: str, script: str, wanted):
    """The page loaded again until its DOM shows what is wanted (the classic pages render once)."""

    def look():
        browser.navigate(url)
        found = browser.evaluate(script)
        return found if wanted(found) else None

    return _until(f"{url} shows it", look, timeout=120)


def _shot(browser: Browser, path: Path) -> None:
    browser.screenshot(path, width=1280, height=900, scale=0.7)
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) < 400_000
    if os.environ.get("UPDATE_DOC_SCREENSHOTS") == "1":
        shutil.copyfile(path, DOCS / path.name)


def test_keyed_release_scraped_paged_and_its_fault_alerted(slot_env, docker_engine, tmp_path: Path) -> None:
    cli, seen = slot_env, []
    port = free_port()
    monitor = run_cli(
        "monitor", "up", "--port", str(port), "--scrape-interval", "1", "--retention", "1d", "--json"
    )
    base = f"http://127.0.0.1:{port}"
    api = httpx.Client(base_url=base, timeout=5)
    try:
        assert monitor.returncode == 0, monitor.stderr
        first = up(cli, "t34-keyed")
        assert first.returncode == 0, first.stderr
        url = json.loads(first.stdout)["url"]
        assert httpx.get(f"{url}/v1/models", timeout=5).status_code == 401  # the key guards the API
        assert httpx.get(f"{url}/metrics", timeout=5).status_code == 200  # and not the figures

        def targets(job=RELEASES_JOB):
            return [
                t
                for t in api.get("/api/v1/targets").json()["data"]["activeTargets"]
                if t["labels"]["job"] == job
            ]

        (target,) = _until("release 1 scraped up", lambda: [t for t in targets() if t["health"] == "up"])
        assert {k: target["labels"][k] for k in ("slot", "release", "profile", "card", "api_key")} == {
            "slot": "cpu",
            "release": "1",
            "profile": "t34-keyed",
            "card": "cpu",
            "api_key": "required",
        }
        _until(
            "release 1's /health scraped up", lambda: [t for t in targets(HEALTH_JOB) if t["health"] == "up"]
        )
        config = yaml.safe_load((scrape_targets.monitor_dir() / "prometheus.yml").read_text())
        assert all("authorization" not in job and "basic_auth" not in job for job in config["scrape_configs"])

        with Browser(f"{base}/classic/targets", tmp_path / "chromium") as browser:
            rows = _page(
                browser,
                f"{base}/classic/targets",
                TARGETS_DOM,
                lambda rows: len(rows) == 2 and all(r["state"] == "up" for r in rows),
            )
            assert sorted(r["endpoint"] for r in rows) == [f"{url}/health", f"{url}/metrics"]
            for row in rows:
                assert {'slot="cpu"', 'release="1"', 'profile="t34-keyed"', 'card="cpu"'} <= set(
                    row["labels"]
                )
            seen.append(browser.evaluate("document.documentElement.outerHTML"))
            _shot(browser, tmp_path / "monitor-targets.png")

            since = time.time()
            second = up(cli, "t34-keyed2")
            assert second.returncode == 0, second.stderr
            _until(
                "the scrape moved to release 2",
                lambda: [(t["labels"]["release"], t["health"]) for t in targets()] == [("2", "up")],
            )
            time.sleep(3)
            gap = serving_gap(api, "cpu", since, time.time())
            print(f"scrape gap at the cut-over, from Prometheus's up samples (1 s scrapes): {gap}")
            assert gap["releases"] == ["1", "2"] and gap["longest_s"] is not None

            # the first fault: release 2's health fails (its fault, a wedged scheduler) while /metrics answers
            def alerts(name, state):
                return [
                    a
                    for a in api.get("/api/v1/alerts").json()["data"]["alerts"]
                    if a["labels"]["alertname"] == name and a["state"] == state
                ]

            (pending,) = _until(
                "DeploytoolReleaseUnhealthy pending",
                lambda: alerts("DeploytoolReleaseUnhealthy", "pending"),
                timeout=HEALTH_FAILS_AFTER_S + 120,
            )
            assert (pending["labels"]["slot"], pending["labels"]["release"]) == ("cpu", "2")
            _until(
                "DeploytoolReleaseUnhealthy firing after its minute",
                lambda: alerts("DeploytoolReleaseUnhealthy", "firing"),
                timeout=240,
            )
            assert not alerts("DeploytoolReleaseDown", "pending") + alerts("DeploytoolReleaseDown", "firing")

            rules = yaml.safe_load((scrape_targets.monitor_dir() / "rules.yml").read_text())
            shipped = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
            page = _page(
                browser,
                f"{base}/classic/alerts",
                ALERTS_DOM,
                lambda p: any(a["state"] == "firing" and 'release="2"' in a["labels"] for a in p["active"]),
            )
            assert set(page["rules"]) >= shipped >= {"DeploytoolReleaseDown", "DeploytoolReleaseUnhealthy"}
            (firing,) = [a for a in page["active"] if a["state"] == "firing"]
            assert {'alertname="DeploytoolReleaseUnhealthy"', 'slot="cpu"', 'profile="t34-keyed2"'} <= set(
                firing["labels"]
            )
            seen.append(browser.evaluate("document.documentElement.outerHTML"))
            browser.evaluate(
                "document.querySelectorAll('tr.alert_header.alert-danger').forEach(h => h.click())"
            )
            _shot(browser, tmp_path / "monitor-alerts.png")

        # the second: the serving release's container stops behind deploytool's back
        (container,) = docker_engine.client.containers.list(
            filters={
                "label": [
                    f"{labels.INSTANCE}={labels.instance()}",
                    f"{labels.SLOT}=cpu",
                    f"{labels.RELEASE}=2",
                ]
            }
        )
        container.stop(timeout=5)
        (pending,) = _until(
            "DeploytoolReleaseDown pending", lambda: alerts("DeploytoolReleaseDown", "pending"), timeout=90
        )
        assert (pending["labels"]["slot"], pending["labels"]["release"]) == ("cpu", "2")
        # a release down altogether pages as down, no longer as unhealthy
        _until(
            "DeploytoolReleaseUnhealthy gone",
            lambda: not alerts("DeploytoolReleaseUnhealthy", "firing") or None,
            timeout=60,
        )

        shown = run_cli("monitor", "status", "--json")
        assert shown.returncode == 0 and json.loads(shown.stdout)["alerts"], shown.stderr
        seen += [shown.stdout, shown.stderr, monitor.stdout, monitor.stderr, first.stdout, first.stderr]
        for path in (
            "/api/v1/targets",
            "/api/v1/status/config",
            "/api/v1/alerts",
            "/api/v1/rules",
            "/api/v1/status/flags",
            '/api/v1/query?query={job="deploytool-releases"}',
        ):
            seen.append(api.get(path).text)
        seen += [
            p.read_text(errors="replace") for p in scrape_targets.monitor_dir().rglob("*") if p.is_file()
        ]
        (prometheus,) = docker_engine.client.containers.list(
            filters={"label": [f"{stack.MONITOR_LABEL}=prometheus", f"{labels.INSTANCE}={labels.instance()}"]}
        )
        seen += [prometheus.logs().decode(errors="replace"), json.dumps(prometheus.attrs)]
        assert all(KEY not in text for text in seen)
        assert any("deploytool-releases" in text for text in seen)  # the search read real answers
    finally:
        run_cli("monitor", "down", "--json")
