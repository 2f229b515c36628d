"""A request whose client goes away is aborted, as SGLang aborts it, so no leftover work occupies
the server after a client gives up (a suite cut by its budget, a timed-out request). The case
that led here: a bench phase measured while requests abandoned by an earlier suite were still
generating (server_running_requests_peak 8 during a phase that sent 4 at a time)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest

from deploytool.server.facts import parse_prometheus
from deploytool.sim import SimSettings, serve_in_thread

pytestmark = pytest.mark.timeout(60)
REAL_ABORT = json.loads((Path(__file__).parent / "data" / "sglang-real" / "dense" / "run.json").read_text())[
    "abort"
]


def _settings(**extra) -> SimSettings:
    # the counters are how the test sees aborts: /metrics exists only with enable_metrics, as in SGLang
    values = {
        "host": "127.0.0.1",
        "port": 0,
        "startup_seconds": 0,
        "decode_tps": 40,
        "log_requests": False,
        "enable_metrics": True,
    }
    return SimSettings(**{**values, **extra})


def _body(stream: bool, tokens: int = 400) -> dict:
    return {
        "model": "sim-model",
        "messages": [{"role": "user", "content": "tell me a long story"}],
        "max_tokens": tokens,
        "ignore_eos": True,
        "stream": stream,
    }


async def _gauges(client: httpx.AsyncClient) -> dict[str, float]:
    return parse_prometheus((await client.get("/metrics")).text)


async def _wait_idle(client: httpx.AsyncClient, within: float) -> dict[str, float]:
    deadline = time.monotonic() + within
    while True:
        m = await _gauges(client)
        if (
            m["sglang:num_running_reqs"] == 0 and m["sglang:num_queue_reqs"] == 0
        ) or time.monotonic() > deadline:
            return m
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("stream", [False, True], ids=["non-streamed", "streamed"])
def test_a_request_whose_client_left_stops_running(stream: bool):
    with serve_in_thread(_settings()) as sim:

        async def main() -> None:
            async with httpx.AsyncClient(base_url=sim.url, timeout=30) as client:
                if stream:
                    async with client.stream("POST", "/v1/chat/completions", json=_body(True)) as response:
                        async for _ in response.aiter_lines():
                            break  # read one line, then hang up
                else:
                    with pytest.raises(httpx.TimeoutException):
                        await client.post("/v1/chat/completions", json=_body(False), timeout=0.4)
                # 400 tokens at 40 tok/s would run 10 s; aborted, the slot frees at once
                m = await _wait_idle(client, within=2.0)
                assert m["sglang:num_running_reqs"] == 0
                # counted as a real SGLang 0.5.17 server counted the same two hang-ups (its counters'
                # moves, tests/data/sglang-real/dense/run.json): a non-streamed abort in
                # num_aborted_requests_total, a stream's not; neither in the request and token counters
                real = REAL_ABORT["stream" if stream else "plain"]["deltas"]
                for counter in (
                    "sglang:num_aborted_requests_total",
                    "sglang:num_requests_total",
                    "sglang:generation_tokens_total",
                ):
                    assert m[counter] == real[counter], counter
                assert m["sglang:prompt_tokens_total"] == 0

        asyncio.run(main())


def test_a_queued_request_whose_client_left_never_runs():
    with serve_in_thread(_settings(max_running_requests=1)) as sim:

        async def main() -> None:
            async with httpx.AsyncClient(base_url=sim.url, timeout=30) as client:
                first = asyncio.ensure_future(client.post("/v1/chat/completions", json=_body(False, 40)))
                await asyncio.sleep(0.2)
                with pytest.raises(httpx.TimeoutException):  # waits behind the first, then gives up
                    await client.post("/v1/chat/completions", json=_body(False, 400), timeout=0.3)
                assert (await first).status_code == 200
                m = await _wait_idle(client, within=2.0)
                assert m["sglang:num_queue_reqs"] == 0 and m["sglang:num_running_reqs"] == 0
                assert m["sglang:generation_tokens_total"] == 40  # the abandoned one generated nothing

        asyncio.run(main())


def test_a_finished_request_is_not_counted_as_aborted():
    with serve_in_thread(_settings(decode_tps=2000)) as sim:

        async def main() -> None:
            async with httpx.AsyncClient(base_url=sim.url, timeout=30) as client:
                response = await client.post("/v1/chat/completions", json=_body(False, 50))
                assert response.json()["usage"]["completion_tokens"] == 50
                m = await _gauges(client)
                assert m["sglang:num_aborted_requests_total"] == 0 and m["sglang:num_requests_total"] == 1

        asyncio.run(main())
