"""Regression tests for review findings on the qualify suites and runner, against the reference
runtime on loopback (some behind a small ASGI wrapper that changes what the sim is sent, to play a
server that ignores `ignore_eos` or truncates a long prompt)."""

from __future__ import annotations

import asyncio
import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import serve_app
from qualify_helpers import SIM_SETTINGS, qualify, sim

from deploytool.qualify import Verdict
from deploytool.qualify.context import SuiteContext
from deploytool.qualify.suites import preflight as preflight_suite
from deploytool.qualify.suites import tools as tools_suite
from deploytool.server.client import EndpointClient
from deploytool.server.facts import ServerFacts
from deploytool.sim import SimSettings, count_tokens, create_app

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def healthy():
    handle = sim(max_running_requests=16)
    yield handle
    handle.stop()


def _rewriting(app: Any, rewrite: Callable[[dict[str, Any]], dict[str, Any]]) -> Any:
    """ASGI wrapper: each POSTed JSON body goes through `rewrite` before the sim sees it."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await app(scope, receive, send)
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        new = json.dumps(rewrite(json.loads(body))).encode()
        headers = [(k, v) for k, v in scope["headers"] if k != b"content-length"]
        scope = dict(scope, headers=[*headers, (b"content-length", str(len(new)).encode())])
        delivered = False

        async def replay() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": new, "more_body": False}
            return await receive()

        await app(scope, replay, send)

    return wrapped


def _drop_ignore_eos(payload: dict[str, Any]) -> dict[str, Any]:
    payload.pop("ignore_eos", None)  # a server that does not honour SGLang's extension
    return payload


def _truncate_streamed_prompts(payload: dict[str, Any]) -> dict[str, Any]:
    # a server that silently keeps only the first quarter of a long streamed prompt
    message = payload["messages"][-1]
    if payload.get("stream") and len(message["content"]) > 10_000:
        message["content"] = message["content"][: len(message["content"]) // 4]
    return payload


# --- 1. stress --------------------------------------------------------------------------------------


def test_stress_fails_when_sampled_generations_did_not_run_to_length(tmp_path: Path) -> None:
    with serve_app(_rewriting(create_app(SimSettings(**SIM_SETTINGS)), _drop_ignore_eos)) as url:
        report = qualify(
            url,
            tmp_path,
            suites=["stress"],
            overrides={"stress": {"long_prompt_tokens": 0, "sampled_requests": 2, "max_tokens": 200}},
        )
    stress = report.suite("stress")
    assert stress.verdict is Verdict.FAILED, stress.reason
    rows = stress.figures["requests"]
    assert not any(r["ok"] for r in rows)
    assert all("finish_reason 'stop'" in r["error"] and "'length'" in r["error"] for r in rows), rows
    assert "sampled-1" in stress.reason and "finish_reason" in stress.reason


def test_stress_fails_when_the_long_prompt_was_not_sent_whole(tmp_path: Path) -> None:
    with serve_app(_rewriting(create_app(SimSettings(**SIM_SETTINGS)), _truncate_streamed_prompts)) as url:
        report = qualify(
            url,
            tmp_path,
            suites=["stress"],
            overrides={"stress": {"long_prompt_tokens": 20_000, "sampled_requests": 1, "max_tokens": 50}},
        )
    stress = report.suite("stress")
    assert stress.verdict is Verdict.FAILED, stress.reason
    long = next(r for r in stress.figures["requests"] if r["request"] == "long-prompt")
    assert not long["ok"] and "prompt_tokens" in long["error"] and "18000" in long["error"], long
    assert "long-prompt" in stress.reason


def test_stress_latency_median_is_over_sampled_rows_and_long_prompt_reported_apart(
    healthy, tmp_path: Path
) -> None:
    report = qualify(
        healthy.url,
        tmp_path,
        suites=["stress"],
        overrides={"stress": {"long_prompt_tokens": 20_000, "sampled_requests": 2, "max_tokens": 100}},
    )
    stress = report.suite("stress")
    assert stress.verdict is Verdict.PASSED, stress.reason
    rows = stress.figures["requests"]
    sampled = [r["latency_s"] for r in rows if r["request"].startswith("sampled")]
    long = next(r for r in rows if r["request"] == "long-prompt")
    assert stress.figures["latency_median_s"] == pytest.approx(statistics.median(sampled))
    assert stress.figures["latency_max_s"] == max(sampled)
    assert stress.figures["long_prompt_latency_s"] == long["latency_s"]
    assert stress.figures["long_prompt_ttft_s"] == long["ttft_s"]
    assert "prompt of about" in stress.method


def test_stress_does_not_describe_a_long_prompt_it_did_not_send(healthy, tmp_path: Path) -> None:
    report = qualify(
        healthy.url,
        tmp_path,
        suites=["stress"],
        overrides={"stress": {"long_prompt_tokens": 0, "sampled_requests": 1, "max_tokens": 50}},
    )
    stress = report.suite("stress")
    assert stress.verdict is Verdict.PASSED, stress.reason
    assert "prompt of about" not in stress.method and "calibration" not in stress.method, stress.method
    assert stress.figures["long_prompt_target_tokens"] is None
    assert stress.figures["long_prompt_latency_s"] is None


# --- 3. needle --------------------------------------------------------------------------------------


def test_needle_depth_prompts_share_no_cached_prefix_with_the_probes(tmp_path: Path) -> None:
    """With a fine-grained prefix cache (8 characters, like a per-token radix cache), every depth's
    prompt must be served cold: TTFT per depth measures prefill, not the cache."""
    with sim(prefix_cache_block_chars=8) as handle:
        report = qualify(
            handle.url,
            tmp_path,
            suites=["needle"],
            overrides={"needle": {"target_tokens": 8000, "depths": [0.1, 0.5, 0.9]}},
        )
    needle = report.suite("needle")
    assert needle.verdict is Verdict.PASSED, needle.reason
    opening = count_tokens("<|user|>")  # the sim's serialized role marker, shared by every prompt
    rows = needle.figures["by_length"]
    assert [r["accuracy"] for r in rows] == [1.0]
    assert all(r["cached_tokens_max"] is not None and r["cached_tokens_max"] <= opening for r in rows), rows


# --- 4. tools ---------------------------------------------------------------------------------------


def test_an_exception_inside_one_tools_case_is_that_cases_failure(
    healthy, tmp_path: Path, monkeypatch
) -> None:
    def broken(calls):
        raise TypeError("'<' not supported between instances of 'NoneType' and 'int'")

    monkeypatch.setattr(tools_suite, "canonical_calls", broken)
    report = qualify(healthy.url, tmp_path, suites=["tools"], overrides={"tools": {"thinking": [False]}})
    tools = report.suite("tools")
    assert tools.verdict is Verdict.FAILED, tools.reason  # not an error: the suite ran to its end
    assert tools.figures["runs"] == 14 * 2
    assert "TypeError" in tools.reason
    failed = [r for r in tools.figures["rows"] if not r["passed"]]
    assert failed and all(r["stream"] for r in failed)  # only the streamed runs compare calls


# --- 5. preflight -----------------------------------------------------------------------------------


def test_preflight_fails_when_the_context_length_is_not_reported(healthy) -> None:
    server = ServerFacts(
        url=healthy.url,
        reachable=True,
        ready=True,
        health_status=200,
        models=None,
        server_info={"max_total_num_tokens": 300_000, "max_running_requests": 16},
        server_info_path="/server_info",
    )

    async def go():
        async with EndpointClient(healthy.url, timeout=10) as client:
            ctx = SuiteContext(
                client=client, settings=preflight_suite.Settings(), server=server, profile=None, target=None
            )
            return await preflight_suite.run(ctx)

    result = asyncio.run(go())
    assert result.verdict is Verdict.FAILED, result.reason
    gate = next(g for g in result.gates if g.name.startswith("KV pool"))
    assert not gate.passed and gate.detail == "context length not reported"
    assert "context length not reported" in result.reason
