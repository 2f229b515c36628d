"""bench's own streaming path (server/fast_stream.py) gives what EndpointClient.chat gives: the same
ChatResult fields for the same stream, and the same error texts for the same faults."""

from __future__ import annotations

import asyncio
import json

import pytest

from deploytool.server.client import EndpointClient
from deploytool.server.fast_stream import StreamClient
from deploytool.sim import SimSettings, serve_in_thread

pytestmark = pytest.mark.timeout(60)


def _event(delta: dict, finish: str | None = None, usage: dict | None = None) -> bytes:
    body = {
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if usage is None else [],
        "usage": usage,
    }
    return f"data: {json.dumps(body)}\n\n".encode()


def _chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


async def _serve(replies: list[list[bytes]], close_after: set[int] = frozenset()):
    """A loopback server answering the i-th request with replies[i], written piece by piece (each
    piece its own write, so events and chunks split across reads); it closes the connection
    after the replies whose index is in close_after. count["conns"]: connections accepted."""
    count = {"n": 0, "conns": 0}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        count["conns"] += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(
                    next(
                        row for row in head.split(b"\r\n") if row.lower().startswith(b"content-length")
                    ).split(b":")[1]
                )
                await reader.readexactly(length)
                i = count["n"]
                count["n"] += 1
                for piece in replies[i]:
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0.005)
                if i in close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", count


def test_events_split_across_reads_crlf_and_usage():
    body = _chunked(
        _event({"role": "assistant", "content": ""}),
        _event({"reasoning_content": "think"}),
        _event({"content": "Hel"}).replace(b"\n\n", b"\r\n\r\n"),
        _event({"content": "lo"}),
        _event({}, "length"),
        _event({}, usage={"prompt_tokens": 5, "completion_tokens": 3}),
        b"data: [DONE]\n\n",
    )
    pieces = [HEAD[:20], HEAD[20:] + body[:7]] + [body[i : i + 13] for i in range(7, len(body), 13)]

    async def go():
        server, url, _ = await _serve([pieces])
        async with server:
            client = StreamClient(url)
            result = await client.chat({"stream": True}, timeout=10)
            await client.aclose()
        return result

    r = asyncio.run(go())
    assert r.ok and r.saw_done and r.status == 200
    assert (r.content, r.reasoning_content, r.finish_reason) == ("Hello", "think", "length")
    assert r.usage["completion_tokens"] == 3 and len(r.chunk_times) == 3
    assert (r.reasoning_chunks, r.answer_chunks) == (1, 2) and r.t_first_token <= r.t_first_answer


def test_http_errors_and_drops_in_endpoint_clients_words():
    error = json.dumps({"object": "error", "message": "The input is too long", "code": 400}).encode()
    replies = [
        [
            b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
            % len(error)
            + error
        ],
        [
            HEAD,
            b"%x\r\n%s\r\n" % (len(_event({"content": "a"})), _event({"content": "a"})),
        ],  # then close: a drop
        [HEAD, _chunked(_event({"content": "a"}))],  # ends without [DONE]
    ]

    async def go():
        server, url, _ = await _serve(replies, close_after={1})
        async with server:
            client = StreamClient(url)
            out = [await client.chat({"stream": True}, timeout=10) for _ in range(3)]
            await client.aclose()
        return out

    bad, dropped, no_done = asyncio.run(go())
    assert bad.status == 400 and bad.error == "HTTP 400: The input is too long"
    assert dropped.error.startswith("stream dropped after 1 chunks")
    assert no_done.error == "stream ended without [DONE] after 1 chunks"


def test_a_stale_kept_alive_connection_is_retried_once_on_a_fresh_one():
    ok = [HEAD, _chunked(_event({"content": "x"}), b"data: [DONE]\n\n")]

    async def go():
        server, url, count = await _serve([ok, ok, ok], close_after={0})
        async with server:
            client = StreamClient(url)
            first = await client.chat({"stream": True}, timeout=10)
            await asyncio.sleep(0.1)  # the server has closed the kept connection by now
            second = await client.chat({"stream": True}, timeout=10)
            await client.aclose()
        return first, second, count["n"]

    first, second, served = asyncio.run(go())
    assert first.ok and second.ok and served == 2


def _dropping_server(drop: set[int], partial: set[int] = frozenset()):
    """Answers requests in order on kept-alive connections, but for the i-th request in `drop`
    closes the connection without a byte, and for one in `partial` sends half a status line and
    closes. Returns (server, url, count)."""
    ok = HEAD + _chunked(_event({"content": "x"}), b"data: [DONE]\n\n")
    count = {"n": 0, "conns": 0}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        count["conns"] += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(
                    next(
                        row for row in head.split(b"\r\n") if row.lower().startswith(b"content-length")
                    ).split(b":")[1]
                )
                await reader.readexactly(length)
                i = count["n"]
                count["n"] += 1
                if i in drop:
                    break
                if i in partial:
                    writer.write(b"HTTP/1.1 2")
                    await writer.drain()
                    break
                writer.write(ok)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    async def start():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", count

    return start()


def _twice(drop: set[int], partial: set[int] = frozenset(), pause: float = 0.05):
    async def go():
        server, url, count = await _dropping_server(drop, partial)
        async with server:
            client = StreamClient(url)
            first = await client.chat({"stream": True}, timeout=10)
            await asyncio.sleep(pause)
            second = await client.chat({"stream": True}, timeout=10)
            await client.aclose()
        return first, second, client.stale_retries, count

    return asyncio.run(go())


def test_a_request_dropped_unanswered_on_a_reused_connection_is_sent_once_more():
    first, second, retries, count = _twice(drop={1})
    assert first.ok and second.ok and retries == 1
    assert count["n"] == 3 and count["conns"] == 2  # the drop, then the same request on a fresh connection


def test_the_retry_happens_once_only():
    first, second, retries, count = _twice(drop={1, 2})  # the fresh connection drops it too
    assert first.ok and not second.ok and retries == 1
    assert second.error.startswith("stream dropped after 0 chunks")
    assert count["n"] == 3


def test_a_drop_on_a_fresh_connection_is_not_retried():
    async def go():
        server, url, count = await _dropping_server(drop={0})
        async with server:
            client = StreamClient(url)
            result = await client.chat({"stream": True}, timeout=10)
            await client.aclose()
        return result, client.stale_retries, count

    result, retries, count = asyncio.run(go())
    assert not result.ok and retries == 0 and count["n"] == 1


def test_a_response_cut_after_its_first_bytes_is_not_retried():
    first, second, retries, count = _twice(drop=set(), partial={1})
    assert first.ok and not second.ok and retries == 0 and count["n"] == 2


def test_an_idle_connection_past_the_keepalive_expiry_is_not_reused():
    async def go(expiry: float):
        server, url, count = await _dropping_server(drop=set())
        async with server:
            client = StreamClient(url, keepalive_expiry=expiry)
            for _ in range(2):
                assert (await client.chat({"stream": True}, timeout=10)).ok
                await asyncio.sleep(0.3)
            await client.aclose()
        return count["conns"]

    assert asyncio.run(go(0.1)) == 2  # idle 0.3 s > 0.1 s: closed by the client, a new one opened
    assert asyncio.run(go(5.0)) == 1  # within the expiry: the same connection


def test_a_timeout_bounds_the_whole_request():
    trickle = [HEAD] + [b"%x\r\n%s\r\n" % (len(_event({"content": "a"})), _event({"content": "a"}))] * 100

    async def go():
        server, url, _ = await _serve([trickle])
        async with server:
            client = StreamClient(url)
            result = await client.chat({"stream": True}, timeout=0.2)
            await client.aclose()
        return result

    r = asyncio.run(go())
    assert r.error == "timed out after 0.2 s" and 0 < r.chunks < 100


def test_same_result_as_endpoint_client_against_the_sim():
    payload = {
        "model": "sim-model",
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                },
            }
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 200,
    }

    async def go(url):
        async with EndpointClient(url) as shared:
            a = await shared.chat(payload, timeout=20)
        fast = StreamClient(url)
        b = await fast.chat(payload, timeout=20)
        await fast.aclose()
        return a, b

    with serve_in_thread(
        SimSettings(host="127.0.0.1", port=0, startup_seconds=0, decode_tps=2000, log_requests=False)
    ) as sim:
        a, b = asyncio.run(go(sim.url))
    assert a.ok and b.ok
    for field in (
        "content",
        "reasoning_content",
        "finish_reason",
        "usage",
        "chunks",
        "answer_chunks",
        "saw_done",
    ):
        assert getattr(a, field) == getattr(b, field), field
    assert a.tool_calls and [(c.name, c.arguments) for c in a.tool_calls] == [
        (c.name, c.arguments) for c in b.tool_calls
    ]
    assert len(a.chunk_times) == len(b.chunk_times)


def test_the_connection_is_kept_and_reused_across_requests():
    payload = {
        "model": "sim-model",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "max_tokens": 20,
        "ignore_eos": True,
    }

    async def go(url):
        client = StreamClient(url)
        seen = []
        for _ in range(3):
            result = await client.chat(payload, timeout=20)
            assert result.ok
            await asyncio.sleep(0.05)  # the chunked body's last chunk may follow [DONE]
            seen.append(list(client._idle))
        await client.aclose()
        return seen

    with serve_in_thread(
        SimSettings(host="127.0.0.1", port=0, startup_seconds=0, decode_tps=2000, log_requests=False)
    ) as sim:
        seen = asyncio.run(go(sim.url))
    assert all(len(idle) == 1 for idle in seen) and seen[0][0] is seen[1][0] is seen[2][0]
