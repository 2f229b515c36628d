"""watch probes a release with its own API key when its health path is not one SGLang
serves without a key; the keyed sim applies SGLang 0.5.23's rule (sim/auth.py)."""

from __future__ import annotations

from dataclasses import replace
from urllib.parse import urlsplit

from deploy_facts import release

from deploytool.deploy.watch import probe
from deploytool.host.releases import Release
from deploytool.profiles import HealthSpec
from deploytool.release.secrets import auth_headers
from deploytool.sim import SimSettings, serve_in_thread

KEY = "watch-test-key-0123456789"


def _release(port: int) -> Release:
    return replace(release(1, "running", port, health="healthy"), api_key=True)


def test_probe_sends_the_key_where_the_health_path_needs_it() -> None:
    handle = serve_in_thread(SimSettings(startup_seconds=0, log_requests=False, api_key=KEY), wait_ready=True)
    try:
        release = _release(urlsplit(handle.url).port)
        keyed_path = HealthSpec(path="/v1/models", timeout=5)
        assert probe(release, keyed_path, auth_headers(KEY)) is True
        assert probe(release, keyed_path) is False  # 401 without it: the probe fails
        assert probe(release, HealthSpec(path="/health", timeout=5)) is True  # open in SGLang, no key needed
    finally:
        handle.stop()
