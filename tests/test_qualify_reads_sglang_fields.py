"""Qualification against a server that reports what SGLang 0.5.23 really reports: the flag
values as given (null when not), the effective running limit in internal_states, the context
length in /v1/models; and a server that is still loading when qualification starts."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import httpx
from qualify_helpers import qualify, sim

from deploytool.qualify import Verdict
from deploytool.qualify.runner import EXIT_COULD_NOT_RUN, QualifyReport
from deploytool.server.facts import ServerFacts
from deploytool.sim import SimSettings, serve_in_thread


def test_preflight_passes_on_a_server_started_without_max_running_requests(tmp_path: Path) -> None:
    with sim() as handle:  # no --max-running-requests: /server_info says null, internal_states has 8
        info = httpx.get(handle.url + "/server_info").json()
        report = qualify(
            handle.url, tmp_path, suites=["preflight"], overrides={"preflight": {"min_running_requests": 8}}
        )
    assert info["max_running_requests"] is None and info["context_length"] is None
    preflight = report.suite("preflight")
    assert preflight.verdict is Verdict.PASSED, preflight.reason
    figures = preflight.figures
    assert figures["running_limit"] == 8
    assert figures["running_limit_source"] == "internal_states[].effective_max_running_requests_per_dp"
    assert figures["max_model_len"] == 262144  # from /v1/models
    assert figures["memory_usage"][0]["token_capacity"] == 300000
    assert figures["weight_version"] == "default" and report.server.model_info_path == "/model_info"
    assert "cuda_graph_max_bs_decode" in info  # the 0.5.23 key is what the sim reports


def test_running_limit_counts_every_dp_rank(tmp_path: Path) -> None:
    with sim(dp_size=2, max_running_requests=6) as handle:
        report = qualify(
            handle.url, tmp_path, suites=["preflight"], overrides={"preflight": {"min_running_requests": 12}}
        )
    assert report.suite("preflight").figures["running_limit"] == 12
    assert report.suite("preflight").verdict is Verdict.PASSED


def test_qualify_waits_for_a_server_that_is_still_loading(tmp_path: Path) -> None:
    # nothing listens for 3 s (weights loading), then /health is an empty 503 for 1 s (warm-up)
    settings = SimSettings(
        startup_seconds=1,
        load_seconds=3,
        decode_tps=5000,
        prefill_tps=2_000_000,
        log_requests=False,
        default_chat_template_kwargs='{"enable_thinking": false}',
    )
    started = time.monotonic()
    with serve_in_thread(settings) as handle:
        try:
            httpx.get(handle.url + "/health", timeout=1)
            raise AssertionError("the sim listened while loading")
        except httpx.ConnectError:
            pass
        report = qualify(
            handle.url,
            tmp_path,
            suites=["preflight", "contract"],
            overrides={"preflight": {"ready_timeout_s": 60}},
        )
    assert report.exit_code == 0, report.summary_line()
    assert report.server.waited_s >= 3.5 and time.monotonic() - started >= 4
    assert report.suite("preflight").figures["waited_for_ready_s"] == report.server.waited_s


def test_qualify_could_not_run_only_when_the_wait_expires(tmp_path: Path) -> None:
    with socket.socket() as bound:  # bound, never listening: connections are refused
        bound.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{bound.getsockname()[1]}"
        started = time.monotonic()
        report = qualify(url, tmp_path, suites=["preflight"], overrides={"preflight": {"ready_timeout_s": 2}})
    assert time.monotonic() - started >= 2
    assert report.exit_code == EXIT_COULD_NOT_RUN and "unreachable" in report.could_not_run  # 6
    assert "refused" in report.could_not_run and "ready_timeout_s" in report.could_not_run


def test_a_weight_version_change_during_the_run_is_reported(tmp_path: Path) -> None:
    server = ServerFacts(
        url="http://x", reachable=True, ready=True, weight_version="v1", weight_version_at_end="v2"
    )
    report = QualifyReport(url="http://x", report_dir=tmp_path, profile=None, server=server)
    assert "WEIGHTS CHANGED during the run (weight_version v1 -> v2)" in report.summary_line()
    from deploytool.qualify.report import results_document

    doc = json.loads(json.dumps(results_document(report), default=str))
    assert doc["server"]["weight_version"] == "v1" and doc["server"]["weight_version_at_end"] == "v2"
