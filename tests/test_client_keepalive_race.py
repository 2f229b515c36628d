"""The keep-alive race: SGLang serves through uvicorn with
timeout_keep_alive = SGLANG_TIMEOUT_KEEP_ALIVE (5 s, sglang/srt/environ.py), the same as
httpx's default keepalive_expiry, so a request can go out on a connection the server is
closing: "Server disconnected without sending a response". The client expires idle
connections earlier and sends such a request once more on a fresh connection; nothing else
is retried."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from deploytool.server.client import KEEPALIVE_EXPIRY_S, EndpointClient

BODY = (
    b'{"id":"x","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,'
    b'"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}'
)
PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


class ScriptedServer:
    """A raw HTTP/1.1 server on loopback whose n-th request on a connection gets what
    `script(connection_number, request_number)` says: "answer", "close" (close without a byte
    of response) or "cut" (headers, then close mid-body)."""

    def __init__(self, script):
        self.script = script
        self.connections = 0
        self.loop = asyncio.new_event_loop()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(asyncio.start_server(self._handle, sock=self.sock))
        self.loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        conn, n = self.connections, 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                await reader.readexactly(length)
                n += 1
                action = self.script(conn, n)
                if action == "close":
                    writer.close()
                    return
                header = (
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n" % len(BODY)
                )
                if action == "cut":
                    writer.write(header + BODY[:10])
                    await writer.drain()
                    writer.close()
                    return
                writer.write(header + BODY)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture
def scripted():
    servers = []

    def make(script):
        servers.append(ScriptedServer(script))
        return servers[-1]

    yield make
    for s in servers:
        s.stop()


async def _two_requests(url: str, **kwargs):
    async with EndpointClient(url, **kwargs) as client:
        first = await client.chat(PAYLOAD)
        second = await client.chat(PAYLOAD)  # goes out on the first one's idle connection
        return first, second, client.stale_retries


def test_a_request_the_server_dropped_unanswered_on_a_reused_connection_is_sent_again(scripted) -> None:
    # every connection's second request meets a server that closes instead of answering
    server = scripted(lambda conn, n: "close" if n == 2 else "answer")
    first, second, retries = asyncio.run(_two_requests(server.url))
    assert first.ok and second.ok, second.error
    assert second.content == "hi"
    assert retries == 1 and server.connections == 2  # the retry opened a fresh connection


def test_without_the_retry_the_same_drop_is_the_failure_seen_in_qualification(scripted) -> None:
    server = scripted(lambda conn, n: "close" if n == 2 else "answer")
    _, second, retries = asyncio.run(_two_requests(server.url, retry_stale_connections=False))
    assert not second.ok and retries == 0
    assert "Server disconnected without sending a response" in second.error


def test_a_drop_on_a_fresh_connection_is_not_retried(scripted) -> None:
    server = scripted(lambda conn, n: "close")
    first, _, retries = asyncio.run(_two_requests(server.url))
    assert not first.ok and "disconnected" in first.error
    assert retries == 0


def test_a_response_cut_after_its_first_bytes_is_not_retried(scripted) -> None:
    server = scripted(lambda conn, n: "cut" if n == 2 else "answer")
    first, second, retries = asyncio.run(_two_requests(server.url))
    assert first.ok and not second.ok and retries == 0
    assert server.connections == 1


def _uvicorn(keep_alive: float) -> tuple[uvicorn.Server, str]:
    async def chat(request: Request) -> JSONResponse:
        await request.body()
        return JSONResponse(json.loads(BODY))

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(512)
    server = uvicorn.Server(uvicorn.Config(app, timeout_keep_alive=keep_alive, log_level="error"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    return server, f"http://127.0.0.1:{sock.getsockname()[1]}"


async def _sweep(url: str, keep_alive: float, **kwargs) -> tuple[list[str], int, int]:
    """80 connections, each sending a request every keep_alive +- 2 ms: the next request of some
    of them leaves just as uvicorn closes their idle connection. (errors, sent, retries)"""
    errors: list[str] = []
    sent = 0
    async with EndpointClient(url, **kwargs) as client:

        async def worker(i: int) -> None:
            nonlocal sent
            for _ in range(8):
                result = await client.chat(PAYLOAD)
                sent += 1
                if not result.ok:
                    errors.append(result.error)
                await asyncio.sleep(keep_alive + (i % 80) * 0.00005 - 0.002)

        await asyncio.gather(*(worker(i) for i in range(80)))
        return errors, sent, client.stale_retries


def test_keepalive_race_against_a_short_keepalive_uvicorn_drops_nothing() -> None:
    # Short, so a sweep (eight rounds of keep_alive and a round of requests) takes seconds: the race
    # is at the edge of the server's timer, whatever its length (about two sweeps in three showed it
    # at 0.25 s, as at 0.5 s)
    keep_alive = 0.25
    server, url = _uvicorn(keep_alive)
    try:
        # The race is real: with httpx's defaults (idle connections kept past the server's
        # keep-alive, no retry) some requests are dropped ("Server disconnected without sending a
        # response" or a reset). It is timing-dependent: a sweep shows it about every other time.
        for _attempt in range(10):
            errors, sent, _ = asyncio.run(
                _sweep(url, keep_alive, keepalive_expiry=5.0, retry_stale_connections=False)
            )
            if errors:
                break
        if not errors:
            # the race needs the client's reuse and the server's close to land within the same
            # instant: on a loaded machine ten sweeps can miss it, and then there is nothing here
            # to hold the retry to (a skip that says so, not a pass)
            pytest.skip("the keep-alive race did not show in ten sweeps on this machine's timing")
        assert all("disconnected" in e or "ReadError" in e or "WriteError" in e for e in errors), errors
        # The same schedule with the retry: the race happens (a request is re-sent) and nothing is dropped.
        rescued = 0
        for _attempt in range(10):
            errors, sent, retries = asyncio.run(_sweep(url, keep_alive, keepalive_expiry=5.0))
            assert (errors, sent) == ([], 640)
            rescued += retries
            if rescued:
                break
        if not rescued:
            pytest.skip("the keep-alive race did not show in ten sweeps with the retry: nothing was re-sent")
        # And with the default expiry, well inside SGLang's 5 s (the server's here is 0.25 s, so
        # the sweep still rides the edge): nothing dropped.
        assert KEEPALIVE_EXPIRY_S < 5.0
        errors, sent, _ = asyncio.run(_sweep(url, keep_alive))
        assert (errors, sent) == ([], 640)
    finally:
        server.should_exit = True
