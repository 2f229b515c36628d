"""deploytool.server.client.EndpointClient over real HTTP on 127.0.0.1: against the sim, and against a
tiny server that writes awkward SSE (events split across writes, CRLF and CR line ends,
keep-alive comments, `data:` without a space, multi-line data, a cut stream, error events)."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import serve_app
from sim_settings import FAST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from deploytool.bench.records import split_reasoning as _split_reasoning
from deploytool.server.client import ChatResult, EndpointClient
from deploytool.sim import SimSettings, serve_in_thread

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def chat(url: str, payload: dict[str, Any], *, timeout: float = 30.0, **kw: Any) -> ChatResult:
    async def go() -> ChatResult:
        async with EndpointClient(url, timeout=timeout) as client:
            return await client.chat(payload, **kw)

    return asyncio.run(go())


def ask(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "sim-model", "messages": [{"role": "user", "content": text}], **extra}


def assert_timings_in_order(res: ChatResult) -> None:
    assert res.chunk_times == sorted(res.chunk_times)
    assert res.t_start <= res.t_first_token <= res.chunk_times[0] <= res.chunk_times[-1] <= res.t_end
    if res.t_first_answer is not None:
        assert res.t_first_token <= res.t_first_answer <= res.chunk_times[-1]


# --- against the sim --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sim() -> Iterator[Any]:
    with serve_in_thread(SimSettings(**FAST), port=0, wait_ready=True) as handle:
        yield handle


def test_streamed_and_plain_answers_agree(sim: Any) -> None:
    payload = ask("Please repeat after me: the quick brown fox.", max_tokens=40)
    plain = chat(sim.url, payload)
    streamed = chat(sim.url, {**payload, "stream": True, "stream_options": {"include_usage": True}})
    assert plain.ok and streamed.ok, (plain.error, streamed.error)
    assert streamed.streamed and streamed.saw_done and streamed.status == 200
    assert streamed.content == plain.content and streamed.content
    assert streamed.finish_reason == plain.finish_reason
    assert (
        streamed.usage["completion_tokens"] == plain.usage["completion_tokens"] == len(streamed.chunk_times)
    )
    assert streamed.model == "sim-model"
    assert streamed.raw is None  # chunk objects are kept only on request
    assert streamed.chunks >= len(streamed.chunk_times) + 1  # + role and finish chunks
    assert_timings_in_order(streamed)


def test_kept_chunks_are_the_chunk_objects(sim: Any) -> None:
    payload = ask("hello", max_tokens=8, ignore_eos=True, stream=True, stream_options={"include_usage": True})
    res = chat(sim.url, payload, keep_chunks=True)
    assert res.ok and isinstance(res.raw, list) and len(res.raw) == res.chunks
    assert all(c["object"] == "chat.completion.chunk" for c in res.raw)
    assert (
        "".join(c["choices"][0]["delta"].get("content") or "" for c in res.raw if c["choices"]) == res.content
    )
    assert res.raw[-1]["usage"] == res.usage


def test_thinking_stream_times_reasoning_before_answer(sim: Any) -> None:
    payload = ask(
        "What is 2 + 3?",
        stream=True,
        chat_template_kwargs={"enable_thinking": True},
        stream_options={"include_usage": True},
    )
    res = chat(sim.url, payload)
    assert res.ok, res.error
    assert res.reasoning_content.startswith("Simulator, not a model") and res.content
    assert res.reasoning_chunks > 0 and res.answer_chunks > 0
    assert res.reasoning_chunks + res.answer_chunks == len(res.chunk_times)
    assert res.t_first_token < res.t_first_answer
    assert_timings_in_order(res)
    reasoning, answer = _split_reasoning(res, 100)
    assert reasoning + answer == 100 and 0 < reasoning < 100


def test_streamed_tool_call_matches_the_plain_one(sim: Any) -> None:
    payload = ask("What's the weather in 'Lisbon'?", tools=[WEATHER])
    plain = chat(sim.url, payload)
    streamed = chat(sim.url, {**payload, "stream": True})
    assert plain.ok and streamed.ok, (plain.error, streamed.error)
    assert streamed.finish_reason == "tool_calls"
    [p], [s] = plain.tool_calls, streamed.tool_calls
    assert (s.name, s.arguments, s.ids_seen) == (p.name, p.arguments, 1)
    assert s.parsed_arguments() == {"city": "Lisbon"}
    assert s.id and s.id.startswith("call_")
    assert streamed.t_first_answer == streamed.t_first_token


def test_sim_faults_are_errors_not_exceptions() -> None:
    with serve_in_thread(SimSettings(**FAST, faults=("http_500_every=1",)), port=0, wait_ready=True) as h:
        res = chat(h.url, ask("hi", stream=True))
    assert not res.ok and res.status == 500 and res.error.startswith("HTTP 500")
    with serve_in_thread(SimSettings(**FAST, faults=("drop_stream=5",)), port=0, wait_ready=True) as h:
        res = chat(h.url, ask("hi", stream=True, max_tokens=50, ignore_eos=True))
    assert not res.ok and not res.saw_done
    assert res.error.startswith(("stream dropped after", "stream ended without [DONE] after")), res.error
    assert res.content  # what arrived before the cut is kept


def test_connection_refused_is_an_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = chat(f"http://127.0.0.1:{port}", ask("hi", stream=True), timeout=5)
    assert not res.ok and res.error.startswith("ConnectError")


# --- against a server that writes awkward SSE --------------------------------------------------------


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    return json.dumps(
        {
            "id": "c1",
            "object": "chat.completion.chunk",
            "model": "tricky",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        },
        ensure_ascii=False,
    ).encode()


USAGE = {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14}
CALL0 = {"index": 0, "id": "call_a", "type": "function", "function": {"name": "f", "arguments": ""}}
CALL1 = {"index": 1, "id": "call_b", "type": "function", "function": {"name": "g", "arguments": ""}}
content_cafe = _chunk({"content": "café"})
cut = content_cafe.index("é".encode()) + 1  # between the two bytes of é

TRICKY: list[bytes] = [
    b": keep-alive\r\n\r\n",
    b"data: " + _chunk({"role": "assistant", "content": ""}) + b"\r\n\r\n",
    b"data:" + _chunk({"reasoning_content": "Think"}) + b"\r\n\r",  # no space; CRLF cut between CR and LF
    b"\n",
    b"data: " + content_cafe[:cut],  # an event, and a character, split across writes
    content_cafe[cut:] + b"\n\n: ping\n\n",
    b"event: message\nid: 7\nretry: 100\ndata: " + _chunk({"content": " ok"}) + b"\n\n",
    b'data: {"object": "chat.completion.chunk", "model": "tricky",\r',  # CRLF cut inside a two-line event
    b'\ndata: "choices": [{"index": 0, "delta": {"content": "!"}}]}\r\n\r\n',  # data lines joined by LF
    b"data: " + _chunk({"tool_calls": [CALL0]}) + b"\r\r",  # lone CR line ends
    b"data: "
    + _chunk({"tool_calls": [CALL1]})
    + b"\n\n"
    + b"data: "
    + _chunk({"tool_calls": [{"index": 0, "id": "call_a", "function": {"arguments": '{"x": '}}]})
    + b"\n\n"
    + b"data: "
    + _chunk({"tool_calls": [{"index": 1, "function": {"arguments": '{"y": 2}'}}]})
    + b"\n\n",
    b"data: " + _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}) + b"\n\n",
    b"data: " + _chunk({}, "tool_calls") + b"\n\n",
    b"data: "
    + json.dumps({"object": "chat.completion.chunk", "choices": [], "usage": USAGE}).encode()
    + b"\n\n",
    b"data: [DONE]\n\n",
    b"data: " + _chunk({"content": "after done"}) + b"\n\n",
]

SCENARIOS: dict[str, list[bytes]] = {
    "tricky": TRICKY,
    "cut": [
        b"data: " + _chunk({"content": "a"}) + b"\n\n",
        b"data: " + _chunk({"content": "b"}) + b"\n\n",
        b"data: " + _chunk({"content": "unterminated"}),
    ],
    "error_event": [
        b"data: " + _chunk({"content": "partial"}) + b"\n\n",
        b'data: {"object": "error", "message": "out of memory", "type": "InternalServerError", '
        b'"code": 500}\n\n',
        b"data: [DONE]\n\n",
    ],
    "bad_json": [
        b"data: " + _chunk({"content": "a"}) + b"\n\n",
        b"data: {not json}\n\n",
        b"data: [DONE]\n\n",
    ],
    "extra_data": [b'data: {"choices": []} {"choices": []}\n\n', b"data: [DONE]\n\n"],
    "done_with_blanks": [b"data: " + _chunk({"content": "a"}) + b"\n\n", b"data: [DONE]  \n\n"],
    "done_without_space": [b"data: " + _chunk({"content": "a"}) + b"\n\n", b"data:[DONE]\n\n"],
}


async def _tricky_chat(request: Request) -> Any:
    body = await request.json()
    name = body["model"]
    if name == "http500":
        return JSONResponse(
            {"object": "error", "message": "kaput", "type": "InternalServerError", "code": 500},
            status_code=500,
        )
    if name == "not_sse":
        return JSONResponse({"choices": []})
    if name == "null_index":  # SGLang's non-streamed calls: index None (or -1), not the position
        calls = [
            {
                "index": idx,
                "id": f"call_{n}",
                "type": "function",
                "function": {"name": fn, "arguments": json.dumps({"n": n})},
            }
            for n, (idx, fn) in enumerate([(None, "f"), (-1, "g"), (None, "h")])
        ]
        return JSONResponse(
            {
                "model": "null_index",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "tool_calls",
                        "message": {"role": "assistant", "content": None, "tool_calls": calls},
                    }
                ],
                "usage": USAGE,
            }
        )

    async def pieces() -> Any:
        if name == "slow":
            yield b"data: " + _chunk({"content": "a"}) + b"\n\n"
            await asyncio.sleep(5)
        for piece in SCENARIOS[name]:
            yield piece
            await asyncio.sleep(0.01)  # each piece its own network read

    return StreamingResponse(pieces(), media_type="text/event-stream")


async def _trickle(request: Request) -> Any:
    """A GET that sends one byte every 0.1 s for 5 s: never idle long enough for a per-read timeout."""

    async def pieces() -> Any:
        for _ in range(50):
            yield b"x"
            await asyncio.sleep(0.1)

    return StreamingResponse(pieces(), media_type="text/plain")


@pytest.fixture(scope="module")
def tricky() -> Iterator[str]:
    app = Starlette(
        routes=[
            Route("/v1/chat/completions", _tricky_chat, methods=["POST"]),
            Route("/trickle", _trickle, methods=["GET"]),
        ]
    )
    with serve_app(app) as url:
        yield url


def stream(url: str, model: str, **kw: Any) -> ChatResult:
    return chat(url, {"model": model, "messages": [{"role": "user", "content": "x"}], "stream": True}, **kw)


def test_awkward_sse_is_assembled(tricky: str) -> None:
    res = stream(tricky, "tricky")
    assert res.ok, res.error
    assert res.saw_done and res.status == 200
    assert res.reasoning_content == "Think"
    assert res.content == "café ok!"  # and nothing after [DONE]
    assert [(c.index, c.id, c.name, c.arguments, c.ids_seen) for c in res.tool_calls] == [
        (0, "call_a", "f", '{"x": 1}', 1),
        (1, "call_b", "g", '{"y": 2}', 1),
    ]
    assert res.tool_calls[0].parsed_arguments() == {"x": 1}
    assert res.finish_reason == "tool_calls"
    assert res.usage == USAGE and res.completion_tokens == 9
    assert res.model == "tricky"
    # token-bearing: Think, café, ok, !, and 5 tool-call deltas
    assert len(res.chunk_times) == 9
    assert (res.reasoning_chunks, res.answer_chunks, res.chunks) == (1, 8, 12)  # + role, finish, usage
    assert res.t_first_token < res.t_first_answer  # the reasoning came one write earlier
    assert_timings_in_order(res)
    assert res.raw is None
    kept = stream(tricky, "tricky", keep_chunks=True)
    assert kept.ok and len(kept.raw) == 12 and kept.raw[2]["choices"][0]["delta"] == {"content": "café"}


def test_stream_cut_without_done(tricky: str) -> None:
    res = stream(tricky, "cut")
    assert not res.ok and not res.saw_done
    assert res.error == "stream ended without [DONE] after 2 chunks"
    assert res.content == "ab"  # the unterminated last event is not an event


def test_error_event_in_stream(tricky: str) -> None:
    res = stream(tricky, "error_event")
    assert not res.ok and res.status == 200
    assert res.error == "error event in stream: out of memory"
    assert res.content == "partial"


def test_http_500_body_is_the_error(tricky: str) -> None:
    res = stream(tricky, "http500")
    assert not res.ok and res.status == 500 and res.error == "HTTP 500: kaput"
    plain = chat(tricky, {"model": "http500", "messages": []})
    assert not plain.ok and plain.status == 500 and plain.error == "HTTP 500: kaput"


def test_malformed_streams(tricky: str) -> None:
    res = stream(tricky, "bad_json")
    assert not res.ok and res.error.startswith("malformed response: JSONDecodeError"), res.error
    assert res.content == "a"
    res = stream(tricky, "extra_data")
    assert not res.ok and "Extra data" in res.error, res.error
    res = stream(tricky, "not_sse")
    assert not res.ok and "text/event-stream" in res.error and "application/json" in res.error


@pytest.mark.parametrize("scenario", ["done_with_blanks", "done_without_space"])
def test_done_variants(tricky: str, scenario: str) -> None:
    res = stream(tricky, scenario)
    assert res.ok and res.saw_done and res.content == "a", res.error


def test_a_trickling_server_times_out(tricky: str) -> None:
    started = time.perf_counter()
    res = stream(tricky, "slow", timeout=0.5)
    assert time.perf_counter() - started < 3
    assert not res.ok and res.error == "timed out after 0.5 s"
    assert res.content == "a" and len(res.chunk_times) == 1


def test_non_streamed_tool_call_without_a_usable_index_takes_its_position(tricky: str) -> None:
    """SGLang sends `"index": null` (or -1) on non-streamed calls: the position is the index, so
    canonical sorting works (it raised TypeError and crashed the tools suite)."""
    from deploytool.qualify.suites.tools.toolcheck import canonical_calls

    res = chat(tricky, {"model": "null_index", "messages": [{"role": "user", "content": "x"}]})
    assert res.ok, res.error
    assert [(c.index, c.name) for c in res.tool_calls] == [(0, "f"), (1, "g"), (2, "h")]
    assert canonical_calls(res.tool_calls) == [("f", {"n": 0}), ("g", {"n": 1}), ("h", {"n": 2})]


def test_get_has_an_overall_time_limit(tricky: str) -> None:
    """httpx's timeout is per read: a GET that trickles bytes must still end at the budget."""
    import httpx

    async def go() -> None:
        async with EndpointClient(tricky, timeout=30) as client:
            with pytest.raises(httpx.TimeoutException, match=r"timed out after 0.5 s"):
                await client.get("/trickle", timeout=0.5)

    started = time.perf_counter()
    asyncio.run(go())
    assert time.perf_counter() - started < 3
