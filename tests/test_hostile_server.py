"""The reference runtime turned hostile (sim/hostile.py: script in every text field, a 1 GiB body,
a byte every 0.25 s, JSON nested 100,000 deep, a stream without end): the wire, qualify, bench, up's
health wait and watch's probe each end within their deadline with a verdict that says why, and
hold bounded memory (the sim runs in its own process, so tracemalloc counts the client only).

One sim process per set of modes serves every test of this module that asks for it (a module
fixture): each test's calls are its own connections, and none changes the server's state."""

from __future__ import annotations

import asyncio
import time
import tracemalloc
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from bench_helpers import tiny_method
from deploy_facts import release as release_row
from qualify_helpers import qualify
from sim_process import SimProcess

from deploytool.bench.runner import run_bench_sync
from deploytool.checks.targets import Target
from deploytool.deploy.health import PROBE_TIMEOUT_S, HealthFailure, wait_until_healthy
from deploytool.deploy.reporter import Reporter
from deploytool.deploy.watch import probe
from deploytool.files import to_jsonable
from deploytool.host.releases import Release
from deploytool.profiles import HealthSpec
from deploytool.qualify import Verdict
from deploytool.server.client import EndpointClient
from deploytool.server.facts import read_server_facts
from deploytool.sim.hostile import SCRIPT

pytestmark = pytest.mark.timeout(300)

# A client that held a 1 GiB body, or every event of an endless stream, would go far past this;
# the wire's caps (a 32 MiB body, a 4 MiB event) keep it well under.
MEMORY_BOUND = 200 * 2**20
DEADLINE_S = 3.0
# Where the deadline itself is what ends the call (a trickle, a stream without end), a shorter one:
# the trickle's bytes (every 0.25 s) still come four times a deadline, so no per-read timeout of
# this length could end the call: only the whole call's deadline does.
SHORT_S = 1.0
ENDS_AT_DEADLINE = ("trickle", "endless_sse")
PAYLOAD = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16, "temperature": 0}


@contextmanager
def measured():
    """Seconds and the peak of memory the test process allocated meanwhile."""
    out: dict[str, float] = {}
    tracemalloc.start()
    started = time.monotonic()
    try:
        yield out
    finally:
        out["seconds"] = time.monotonic() - started
        out["peak"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()


def _peak_rss(pid: int) -> int:
    """A process's peak resident memory (Linux's VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def deadline(mode: str) -> float:
    return SHORT_S if mode in ENDS_AT_DEADLINE else DEADLINE_S


@pytest.fixture(scope="module")
def hostile():
    """hostile(*modes): the sim in its own process with these faults, started once per module."""
    servers: dict[tuple[str, ...], SimProcess] = {}

    def get(*modes: str) -> SimProcess:
        if modes not in servers:
            servers[modes] = SimProcess(
                fault=list(modes), decode_tps=2000, default_chat_template_kwargs='{"enable_thinking": false}'
            )
        return servers[modes]

    yield get
    for server in servers.values():
        server.stop()


async def _every_call(url: str, limit: float) -> dict:
    async with EndpointClient(url, timeout=limit) as client:
        facts = await read_server_facts(client, timeout=limit)
        payload = {**PAYLOAD, "model": facts.model_id or "default"}
        plain = await client.chat(payload)
        streamed = await client.chat({**payload, "stream": True})
        fast = client.fast_stream()
        try:
            bench_path = await fast.chat({**payload, "stream": True}, timeout=limit)
        finally:
            await fast.aclose()
    return {"facts": facts, "plain": plain, "streamed": streamed, "fast": bench_path}


# mode -> what /v1/models, a plain chat and a streamed chat (both transports) must say
EXPECTED = {
    "huge_body": (
        "larger than 32 MiB",
        "response refused: the response body larger than 32 MiB: not read further",
        "response refused: an SSE event larger than 4 MiB: not read further",
    ),
    "trickle": ("timed out after 1 s", "timed out after 1 s", "timed out after 1 s"),
    "deep_json": (
        "JSON nested deeper than 64 levels",
        "response refused: JSON nested deeper than 64 levels",
        "response refused: an SSE event's JSON is nested too deep",
    ),
}


@pytest.mark.parametrize("mode", ["script_text", "huge_body", "trickle", "deep_json", "endless_sse"])
def test_every_call_of_the_wire_ends_by_its_deadline_with_a_reason(mode: str, hostile) -> None:
    server, limit = hostile(mode), deadline(mode)
    with measured() as cost:
        got = asyncio.run(_every_call(server.url, limit))
        server_peak = _peak_rss(server.proc.pid)
    # the sim makes its 1 GiB as it sends it: its own peak stays far below
    assert server_peak < 512 * 2**20, server_peak
    facts, results = got["facts"], (got["plain"], got["streamed"], got["fast"])
    # facts: one timeout at most (a server that trickles is not waited on again), then four chats
    assert cost["seconds"] < 4 * limit + 10, cost
    assert cost["peak"] < MEMORY_BOUND, cost
    if mode in EXPECTED:
        models, plain, stream = EXPECTED[mode]
        assert models in facts.unreadable["/v1/models"], facts.unreadable
        assert facts.models is None and facts.model_id is None
        assert got["plain"].error == plain
        assert got["streamed"].error == got["fast"].error == stream, (
            got["streamed"].error,
            got["fast"].error,
        )
        assert not any(r.ok for r in results)
    elif mode == "script_text":  # read as text, kept as text: the reports' business to escape it
        assert facts.model_id.endswith(SCRIPT)
        assert all(r.ok and r.content.endswith(SCRIPT) for r in results), [r.error for r in results]
    else:  # endless_sse: the plain chat is served; a stream ends at its deadline or the stream cap
        assert got["plain"].ok
        for r in results[1:]:
            assert not r.ok and r.chunks > 0
            assert r.error == "timed out after 1 s" or "the stream larger than" in r.error, r.error


@pytest.mark.parametrize("mode", ["script_text", "huge_body", "trickle", "deep_json", "endless_sse"])
def test_qualify_ends_with_a_verdict(mode: str, tmp_path: Path, hostile) -> None:
    server, limit = hostile(mode), deadline(mode)
    with measured() as cost:
        report = qualify(
            server.url,
            tmp_path,
            suites=["preflight", "contract"],
            limit=2,
            overrides={
                "preflight": {"probe_timeout_s": min(limit, 2), "ready_timeout_s": 5},
                "contract": {"request_timeout_s": limit, "idle_timeout_s": min(limit, 2), "max_tokens": 16},
            },
        )
    assert cost["seconds"] < 120, cost
    assert cost["peak"] < MEMORY_BOUND, cost
    assert report.verdict in ("passed", "failed", "could not run"), report.summary_line()
    results = (tmp_path / "report" / "results.json").read_text()
    assert report.summary_line() in results or report.verdict in results
    for name in ("preflight", "contract"):
        suite = report.suite(name)
        assert suite is not None and suite.verdict in tuple(Verdict), name
        if mode not in ("script_text", "endless_sse"):  # (a stream that never ends is cut at its deadline)
            assert suite.verdict is not Verdict.PASSED and suite.reason, (name, suite.reason)
    if mode == "trickle":
        assert (
            "timed out" in str(to_jsonable(report.server.unreadable))
            or "timed out" in report.suite("contract").reason
        )


def test_qualify_waits_no_longer_than_its_ready_timeout_for_a_health_path_that_trickles(
    tmp_path: Path, hostile
) -> None:
    server = hostile("trickle", "hostile_health")
    with measured() as cost:
        report = qualify(
            server.url,
            tmp_path,
            suites=["preflight"],
            # two probes of 1 s, a pause of 0.5 s between: the second, the one the reason quotes,
            # still has a whole second to see the trickle's headers before the wait ends
            overrides={"preflight": {"probe_timeout_s": 1, "ready_timeout_s": 2.5}},
        )
    assert report.server.waited_s < 2.5 + 1, report.server.waited_s  # no probe runs past the wait
    # then the facts (one probe timeout: the rest are not waited for) and preflight's own probes
    assert cost["seconds"] < 2.5 + 4 * 1 + 6, cost
    assert report.could_not_run and "never became ready" in report.could_not_run, report.could_not_run
    assert "answered HTTP 200, then its body did not arrive whole" in report.could_not_run
    assert "timed out" in report.could_not_run


@pytest.mark.parametrize("mode", ["huge_body", "trickle", "deep_json", "endless_sse"])
def test_bench_ends_with_every_failure_named(mode: str, hostile) -> None:
    # a request's budget and the run's bound: shorter where the deadline is what ends a request
    request_s, run_s = (1, 3) if mode in ENDS_AT_DEADLINE else (2, 6)
    method = tiny_method(
        request_timeout_s=request_s,
        run_timeout_s=run_s,
        warmup_requests=1,
        decode_requests=1,
        load_concurrency=[2],
        load_requests_per_slot=1,
        prefill_prompts_each=1,
    )
    server = hostile(mode)
    with measured() as cost:
        run = run_bench_sync(Target(url=server.url, profile=None), method, progress=False)
    # the facts before and after (one request's budget each: a trickling server is not waited on
    # twice), the run's time bound (from the start, facts included), a request cut by it
    assert cost["seconds"] < request_s + run_s + request_s + request_s + 15, cost
    assert cost["peak"] < MEMORY_BOUND, cost
    failed = [r for r in run.requests if not r.ok]
    words = {
        "huge_body": "larger than",
        "trickle": "timed out",
        "deep_json": "nested too deep",
        "endless_sse": "",
    }[mode]
    # on a loaded machine the run's bound can fall inside the warm-up, before any measured
    # request: then the run is incomplete and its notes name what the warm-up met
    cut_in_warmup = not run.complete and any("during warmup" in n for n in run.notes)
    assert (failed and (run.errors_total > 0 or not run.complete)) or (
        cut_in_warmup and any(words in n for n in run.notes)
    ), run.notes
    assert all(words in (r.error or "") for r in failed), {r.error for r in failed}
    if mode == "endless_sse":
        assert all(
            "timed out" in r.error or "stream larger than" in r.error or "time bound" in r.error
            for r in failed
        ), {r.error for r in failed}


class _Engine:
    """The engine as up's health wait sees it: a container that runs and says it is healthy."""

    def refresh(self, release: Release) -> Release:
        return release

    def exit_code(self, release: Release) -> int:
        return 0

    def logs_tail(self, release: Release) -> str:
        return "(log)"


@pytest.mark.parametrize("mode", ["huge_body", "trickle"])
def test_ups_health_wait_and_watchs_probe_end_by_their_deadlines(mode: str, hostile) -> None:
    server = hostile(mode, "hostile_health")
    release = release_row(1, "running", urlsplit(server.url).port, health="healthy")
    budget = 1  # far below PROBE_TIMEOUT_S (5 s): a probe that ran its own full time would show
    with (
        measured() as cost,
        pytest.raises(HealthFailure, match="did not become healthy within its health budget of 1 s"),
    ):
        wait_until_healthy(_Engine(), release, budget=budget, path="/health", reporter=Reporter())
    # the budget (a probe never runs past it, PROBE_TIMEOUT_S is longer) and a pause of 0.5 s
    assert cost["seconds"] < min(budget + PROBE_TIMEOUT_S, budget + 3), cost
    assert cost["peak"] < MEMORY_BOUND, cost
    with measured() as cost:
        assert probe(release, HealthSpec(path="/health", timeout=budget)) is False
    assert cost["seconds"] < budget + 3, cost
    assert cost["peak"] < MEMORY_BOUND, cost
