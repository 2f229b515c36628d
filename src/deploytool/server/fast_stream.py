"""bench's own streaming path: HTTP/1.1 over a bare asyncio.Protocol, for the one request shape
bench sends (POST /v1/chat/completions, stream: true), so the client's CPU per token stays at or
below SGLang's own benchmark client (benchmarks/client_overhead.py --paced).

`EndpointClient.fast_stream()` makes one for the same endpoint. Why not the shared EndpointClient here: against a server that writes one event per token (SGLang
does), the client pays its HTTP stack once per network read, and httpx over anyio costs more per
read than SGLang's aiohttp. This path pays one `data_received` call, one chunked-encoding step
and one JSON scan per event. The events go to the same walker as EndpointClient's
(server/chat_stream.py), so it returns the same `ChatResult` and the same error texts as
`EndpointClient.chat` (qualify and everything else keep using that client); it is used only for
plain-http endpoints, and https falls back to EndpointClient.

Connections are kept alive and reused and never shared between two requests in flight, by the
same rules as EndpointClient (wire.py): an idle connection is dropped after KEEPALIVE_EXPIRY_S,
a request that failed on a reused connection before any byte of the answer is sent once more
(wire.resend_after_race), each request has one deadline from connect to its last byte, and the
head, an event and the whole stream are read only up to their caps.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any
from urllib.parse import urlsplit

from . import wire
from .chat_result import ChatResult, error_message
from .chat_stream import ChatStream
from .wire import KEEPALIVE_EXPIRY_S, WireError

_perf = time.perf_counter


class _Dropped(Exception):
    pass


class _Conn(asyncio.Protocol):
    """One connection; `sink` gets each read (bytes) and None at EOF."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.sink: Any = None
        self.lost = False
        self.idle_since = 0.0  # when it went back to the idle pool (time.monotonic())

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # create_connection's is a Transport; asyncio types the callback for any kind

    def data_received(self, data: bytes) -> None:
        if self.sink is not None:
            self.sink(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.sink is not None:
            self.sink(None)


class _Response:
    """Parses one streamed response as its bytes arrive: status line and headers, chunked (or
    length- or close-delimited) body; the body's bytes go to the shared ChatStream walker."""

    def __init__(
        self, result: ChatResult, done: asyncio.Future, max_bytes: int = wire.MAX_STREAM_BYTES
    ) -> None:
        self.result, self.done = result, done
        self.max_bytes = self.left = (
            max_bytes  # the response's bytes allowed, and still allowed (head and body)
        )
        self.head = b""
        self.status: int | None = None
        self.chunked = False
        self.length: int | None = None
        self.keep_alive = True
        self.raw = bytearray()  # undecoded chunked body
        self.error_body = bytearray()
        self.stream = ChatStream(result)
        self.ended = False  # the HTTP body is complete
        self.on_ended: Any = None  # called when a chunked body ends after the result was done

    # --- bytes in ---------------------------------------------------------------------------
    def feed(self, data: bytes | None) -> None:
        if self.done.done():
            # [DONE] came before the chunked body's last chunk: read on to the end of the body, so
            # the connection can be kept for the next request
            if data is not None and self.chunked and not self.ended and self.keep_alive:
                self.left -= len(data)
                if self.left < 0:  # never the body's end: the connection is not kept, the bytes not held
                    self.keep_alive = False
                    del self.raw[:]
                    if self.on_ended is not None:
                        self.on_ended()  # closes it
                    return
                self.raw += data
                try:
                    self._dechunk(0.0)
                except ValueError:
                    self.keep_alive = False
            elif data is None:
                self.keep_alive = False
            return
        try:
            if data is None:
                self._eof()
            else:
                self.left -= len(data)
                if self.left < 0:
                    raise wire.over_cap("the stream", self.max_bytes)
                self._feed(data, _perf())
        except WireError as exc:  # in EndpointClient.chat's words
            self.keep_alive = False
            self._finish(f"response refused: {exc}")
        except Exception as exc:
            self._finish(f"malformed response: {type(exc).__name__}: {exc}")

    def _feed(self, data: bytes, now: float) -> None:
        if self.status is None:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                if len(self.head) > wire.MAX_HEAD_BYTES:
                    raise wire.over_cap("the response head", wire.MAX_HEAD_BYTES)
                return
            data = self.head[end + 4 :]
            self._headers(self.head[:end].decode("latin-1"))
            if self.done.done():
                return
        if self.chunked:
            self.raw += data
            self._dechunk(now)
        else:
            if self.length is not None:
                self.length -= len(data)
            self._body(data, now)
            if self.length is not None and self.length <= 0:
                self.ended = True
                self._end()

    def _headers(self, head: str) -> None:
        lines = head.split("\r\n")
        parts = lines[0].split(" ", 2)
        self.status = self.result.status = int(parts[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        self.chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        if "content-length" in headers:
            self.length = int(headers["content-length"])
        self.keep_alive = headers.get("connection", "").lower() != "close"
        if self.status == 200:
            ctype = headers.get("content-type", "").partition(";")[0]
            if "text/event-stream" not in ctype:
                self._finish(
                    f"SSEError: Expected response header Content-Type to contain 'text/event-stream', "
                    f"got {ctype!r}"
                )

    def _dechunk(self, now: float) -> None:
        raw = self.raw
        while True:
            # only the head of the buffer can hold the size line: a line that never ends is
            # refused at its cap, not searched again at every read
            eol = raw.find(b"\r\n", 0, wire.MAX_CHUNK_LINE_BYTES + 2)
            if eol < 0:
                if len(raw) > wire.MAX_CHUNK_LINE_BYTES:
                    raise wire.over_cap("a chunk-size line", wire.MAX_CHUNK_LINE_BYTES)
                return
            size = int(raw[:eol].split(b";", 1)[0], 16)
            if size == 0:
                self.ended = True
                del raw[:]
                if not self.done.done():
                    self._end()
                if self.on_ended is not None:
                    self.on_ended()
                return
            if len(raw) < eol + 2 + size + 2:
                return
            payload = bytes(raw[eol + 2 : eol + 2 + size])
            del raw[: eol + 2 + size + 2]
            if self.done.done():
                continue
            # _body, inlined: this is once per event against a server that writes one per token
            if self.status != 200:
                self.error_body += payload
            elif self.stream.feed(payload, now):  # [DONE] or an error event: the result is complete
                self._finish(None)

    def _body(self, data: bytes, now: float) -> None:
        if self.status != 200:
            self.error_body += data
        elif self.stream.feed(data, now):  # [DONE] or an error event: the result is complete
            self._finish(None)

    # --- endings ------------------------------------------------------------------------------
    def _end(self) -> None:
        """The HTTP body is complete (the walker says when that came without [DONE])."""
        if self.status != 200:
            text = bytes(self.error_body).decode("utf-8", "replace")
            self._finish(f"HTTP {self.status}: {error_message(text)}")
        else:
            self._finish(None)

    def _eof(self) -> None:
        self.keep_alive = False
        if self.status is not None and self.length is None and not self.chunked:
            self.ended = True  # a close-delimited body
            self._end()
        else:
            got = f" after {self.stream.n} chunks"
            self._finish(f"stream dropped{got}: the server closed the connection mid-response")

    def _finish(self, error: str | None) -> None:
        self.stream.finish(error, body_ended=self.ended)
        if not self.done.done():
            self.done.set_result(None)


class StreamClient:
    """POST /v1/chat/completions with stream: true, for bench. `chat` never raises for a server
    fault: the ChatResult's error says what happened, in EndpointClient's words."""

    def __init__(
        self,
        base_url: str,
        *,
        keepalive_expiry: float = KEEPALIVE_EXPIRY_S,
        api_key: str | None = None,
        max_stream_bytes: int = wire.MAX_STREAM_BYTES,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http":
            raise ValueError("StreamClient speaks plain http only")
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self.authority = parts.netloc
        # a server started with an API key wants `Authorization: Bearer KEY` on every call
        self._auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
        self._idle: list[_Conn] = []
        self.keepalive_expiry = keepalive_expiry
        self.max_stream_bytes = max_stream_bytes
        self.stale_retries = 0  # requests re-sent after the keep-alive race

    async def aclose(self) -> None:
        for conn in self._idle:
            if conn.transport is not None:
                conn.transport.close()
        self._idle.clear()

    async def chat(self, payload: dict[str, Any], *, timeout: float) -> ChatResult:
        body = json.dumps(payload).encode()
        request = (
            f"POST {self.prefix}/v1/chat/completions HTTP/1.1\r\nHost: {self.authority}\r\n"
            f"Content-Type: application/json\r\nAccept: text/event-stream\r\nCache-Control: no-store\r\n"
            f"{self._auth}Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        t_start = _perf()
        deadline = t_start + timeout
        result, retry = await self._attempt(request, t_start, deadline, timeout)
        if retry:
            # a kept-alive connection the server had closed meanwhile (its idle timeout): the
            # request never reached it, so it is sent once more, on a fresh connection
            self.stale_retries += 1
            result, _ = await self._attempt(request, t_start, deadline, timeout, fresh=True)
        return result

    async def _attempt(
        self, request: bytes, t_start: float, deadline: float, timeout: float, fresh: bool = False
    ) -> tuple[ChatResult, bool]:
        loop = asyncio.get_running_loop()
        result = ChatResult(streamed=True, t_start=t_start)
        done: asyncio.Future = loop.create_future()
        response = _Response(result, done, self.max_stream_bytes)

        # The bound is for the whole request (a server trickling bytes must still time out); a
        # timer rather than asyncio.wait_for, whose 3.11 form can swallow a cancellation.
        def time_out() -> None:
            if not done.done():
                done.set_exception(TimeoutError())

        timer = loop.call_later(max(0.0, deadline - _perf()), time_out)
        conn, reused = None, False
        try:
            conn, reused = await self._connection(result, max(0.001, deadline - _perf()), fresh)
            if conn is None:
                return result, False
            assert conn.transport is not None  # _connection hands out connected ones only
            conn.sink = response.feed
            conn.transport.write(request)
            await done
        except TimeoutError:
            response._finish(f"timed out after {timeout:g} s")
            response.keep_alive = False
        finally:
            timer.cancel()
            if conn is not None:
                self._release(conn, response)
            result.t_end = _perf()
            result.ok = result.error is None
        # a connection failure (not our deadline, not a refused response) with no byte of the answer
        failed = not result.ok and not (result.error or "").startswith(("timed out", "response refused"))
        retry = failed and wire.resend_after_race(
            reused=reused, answered=response.status is not None or bool(response.head)
        )
        return result, retry

    def _release(self, conn: _Conn, response: _Response) -> None:
        """Back to the idle pool when the body ended cleanly; kept reading when only the chunked
        body's last chunk is still to come after [DONE]; closed otherwise."""
        if conn.lost or not response.keep_alive or conn.transport is None:
            conn.sink = None
            if conn.transport is not None:
                conn.transport.close()
        elif response.ended:
            self._to_idle(conn)
        elif response.result.saw_done and response.chunked:

            def ended() -> None:
                if response.keep_alive and not conn.lost:
                    self._to_idle(conn)
                else:
                    conn.sink = None
                    if conn.transport is not None:
                        conn.transport.close()

            response.on_ended = ended
            conn.sink = response.feed
        else:
            conn.sink = None
            conn.transport.close()

    def _to_idle(self, conn: _Conn) -> None:
        conn.sink = None
        conn.idle_since = time.monotonic()
        self._idle.append(conn)

    async def _connection(
        self, result: ChatResult, budget: float, fresh: bool = False
    ) -> tuple[_Conn | None, bool]:
        now = time.monotonic()
        while self._idle and not fresh:
            conn = self._idle.pop()
            usable = not conn.lost and conn.transport is not None and not conn.transport.is_closing()
            if usable and now - conn.idle_since < self.keepalive_expiry:
                return conn, True
            if conn.transport is not None:  # idle past the expiry: closed by us, before the server does
                conn.transport.close()
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(loop.create_connection(_Conn, self.host, self.port), budget)
        except TimeoutError:
            result.error = f"timed out after {budget:g} s (connecting)"
            return None, False
        except OSError as exc:
            result.error = f"ConnectError: {exc or 'connection failed'}"
            return None, False
        return conn, False
