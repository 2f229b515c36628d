"""A server that hangs or fails every request ends qualification within about two request
timeouts, naming the cause; the breaker stops a suite from sending into a dead server."""

from __future__ import annotations

import time
from pathlib import Path

from qualify_helpers import OURS, qualify, sim

from deploytool.errors import EXIT_COULD_NOT_RUN
from deploytool.qualify import Verdict


def test_a_server_that_sends_headers_and_then_nothing_ends_qualification_quickly(tmp_path: Path) -> None:
    with sim(faults=("hang",)) as handle:
        started = time.monotonic()
        # a short probe timeout: each hanging probe costs this, and the verdict is the same
        report = qualify(handle.url, tmp_path, limit=None, overrides={"preflight": {"probe_timeout_s": 1}})
        took = time.monotonic() - started
    # Two request timeouts of the quickest suite (contract: 120 s) is the promise; far less is used.
    assert took < 60, took
    assert report.exit_code == EXIT_COULD_NOT_RUN and not report.passed, (
        report.summary_line()
    )  # 6, not 2 (usage)
    assert "stopped answering" in report.could_not_run and "health probe" in report.could_not_run
    assert report.suite("preflight").verdict is Verdict.FAILED
    assert "timed out" in report.suite("preflight").reason
    for name in OURS[1:]:
        suite = report.suite(name)
        assert suite.verdict is Verdict.ERROR and suite.reason.startswith("not run"), (name, suite.reason)
    assert (
        "health probe" in report.suite("contract").reason and "timed out" in report.suite("contract").reason
    )
    assert "failed 2 health probes in a row" in report.suite("tools").reason


def test_a_server_that_answers_500_to_everything_ends_qualification_quickly(tmp_path: Path) -> None:
    with sim(faults=("http_500_every=1",)) as handle:
        started = time.monotonic()
        report = qualify(handle.url, tmp_path, limit=None)
        took = time.monotonic() - started
    assert took < 30, took
    assert report.exit_code == 1, report.summary_line()
    assert "HTTP 500" in report.suite("contract").reason
    assert (
        report.suite("vision").reason.startswith("not run: health probe")
        and "HTTP 500" in report.suite("vision").reason
    )
    assert all(report.suite(n).verdict is Verdict.ERROR for n in OURS[2:])


def test_the_breaker_stops_a_suite_after_consecutive_failures_and_says_so(tmp_path: Path) -> None:
    with sim(faults=("http_500_every=1",)) as handle:
        report = qualify(
            handle.url,
            tmp_path,
            suites=["gsm8k"],
            limit=50,
            overrides={"gsm8k": {"concurrency": 1, "thinking": [False], "styles": ["lm-eval"]}},
        )
    gsm8k = report.suite("gsm8k")
    assert gsm8k.verdict is Verdict.FAILED
    assert gsm8k.figures["not_sent"]["requests"] == 47  # 3 sent, 3 failed with HTTP 500, the rest held back
    assert "47 request(s) not sent: 3 consecutive failed requests (HTTP 5xx" in gsm8k.reason


def test_a_stream_that_goes_quiet_fails_at_its_idle_timeout_not_its_budget(tmp_path: Path) -> None:
    with sim(faults=("hang",)) as handle:
        started = time.monotonic()
        report = qualify(
            handle.url,
            tmp_path,
            suites=["contract"],
            overrides={
                "contract": {
                    "idle_timeout_s": 0.5,
                    "max_tokens": 16,
                    "min_decode_tps": 80,
                    "request_timeout_s": 100,
                }
            },
        )
        took = time.monotonic() - started
    # Two non-streamed requests, each allowed 0.5 s + its prompt's and max_tokens' share (16 / 80
    # tokens/s): about 2 s. The budget would take 200 s; half of one request's budget tells them apart
    # with room for a loaded machine, where a bound near 2 s would be the machine's load under test
    assert took < 50, took
    assert (
        "no byte for" in report.suite("contract").reason and "idle timeout" in report.suite("contract").reason
    )
