"""The one client deploytool uses to talk to an OpenAI-compatible (SGLang) endpoint: the only code
besides bench's fast streaming path (fast_stream.py, made by `EndpointClient.fast_stream`) that
speaks HTTP to a serving runtime (docs/architecture.md).

One endpoint object: its base URL, API key, timeouts and the rules of wire.py (a total deadline on
every call, size caps, JSON depth, the keep-alive race) hold for every call through it: health,
the ready-wait (readiness.py), facts (facts.py), chat streamed or not. A request never raises for
a server fault: `chat` returns a `ChatResult` whose `error` says what went wrong (timeout, HTTP
status, dropped stream, malformed SSE, a response over a cap), and `health` a `HealthAnswer`, so
a caller records the failure and goes on.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from dataclasses import dataclass
from typing import Any

import httpx

from . import wire
from .chat_result import ChatResult, ToolCall, error_message
from .chat_stream import ChatStream, KeptChatStream
from .fast_stream import StreamClient
from .wire import KEEPALIVE_EXPIRY_S, WireError

_perf = time.perf_counter
_SSE_HEADERS = {"Accept": "text/event-stream", "Cache-Control": "no-store"}


class SSEError(httpx.TransportError):
    """The response is not an event stream (wrong Content-Type)."""


# Trace events (httpcore) that tell whether a request opened its own connection and whether any
# of the response arrived.
_NEW_CONNECTION = "connection.connect_tcp.started"
_RESPONSE_STARTED = "http11.receive_response_headers.complete"


# httpx's default TLS context, made once a process for each CA setting it reads (SSL_CERT_FILE,
# SSL_CERT_DIR) instead of once for every client: parsing the CA bundle is about 40 ms of CPU, more
# than the request of most clients here (a health probe, a drain, a candidate's readiness wait,
# each a client of its own on a loopback port). The same context httpx would make, shared.
_TLS: dict[tuple[str | None, str | None], ssl.SSLContext] = {}


def _tls() -> ssl.SSLContext:
    key = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    if key not in _TLS:
        _TLS[key] = httpx.create_ssl_context()
    return _TLS[key]


# the response of a GET as callers above server/ name it: the one wire's type, without importing httpx
HttpResponse = httpx.Response


@dataclass
class HealthAnswer:
    """One GET of a health path: its status and the start of its body, or why there was none."""

    status: int | None = None
    body: str = ""  # the first 300 characters
    error: str | None = None  # no status: why (refused, timed out, dropped, over a cap)
    refused: bool = False  # nothing answered at the address (ConnectError)
    headers_status: int | None = None  # the status line arrived, the rest of the answer did not

    @property
    def reachable(self) -> bool:
        """Something answered HTTP at all."""
        return self.status is not None or self.headers_status is not None

    @property
    def ok(self) -> bool:
        return self.status == 200


class EndpointClient:
    """Async client for one endpoint. Use as `async with EndpointClient(url) as c:`.

    A request that fails before any response byte arrived on a *reused* connection is sent once
    more on a fresh connection (wire.resend_after_race: the keep-alive race). Any other failure
    stays a failure.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 60.0,
        max_connections: int = 256,
        keep_chunks: bool = False,
        api_key: str | None = None,
        headers: dict[str, str] | None = None,
        keepalive_expiry: float = KEEPALIVE_EXPIRY_S,
        retry_stale_connections: bool = True,
        max_body_bytes: int = wire.MAX_BODY_BYTES,
        max_stream_bytes: int = wire.MAX_STREAM_BYTES,
    ):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.api_key = api_key
        self.keepalive_expiry = keepalive_expiry
        self.max_body_bytes, self.max_stream_bytes = max_body_bytes, max_stream_bytes
        # Keep every streamed chunk dict in ChatResult.raw (costs memory and CPU per token).
        self.keep_chunks = keep_chunks
        self.retry_stale_connections = retry_stale_connections
        self.stale_retries = 0  # requests re-sent after the keep-alive race (reported by callers)
        limits = httpx.Limits(
            max_connections=max_connections,
            max_keepalive_connections=max_connections,
            keepalive_expiry=keepalive_expiry,
        )
        # A server started with an API key wants `Authorization: Bearer KEY` on every call (the
        # fresh-connection client of the stale-connection retry copies these headers).
        headers = dict(headers or {})
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._http = httpx.AsyncClient(
            base_url=self.base_url, timeout=timeout, limits=limits, headers=headers or None, verify=_tls()
        )
        self._fresh: httpx.AsyncClient | None = None  # no keep-alive: every request its own connection

    async def __aenter__(self) -> EndpointClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()
        if self._fresh is not None:
            await self._fresh.aclose()

    def fast_stream(self) -> StreamClient:
        """bench's streaming path to the same endpoint (same key, same keep-alive expiry and caps);
        plain http only (ValueError otherwise)."""
        return StreamClient(
            self.base_url,
            api_key=self.api_key,
            keepalive_expiry=self.keepalive_expiry,
            max_stream_bytes=self.max_stream_bytes,
        )

    async def send(self, request: httpx.Request, *, stream: bool = False) -> httpx.Response:
        """Send `request`; on the keep-alive race (see the class), once more on a fresh connection."""
        if not self.retry_stale_connections:
            return await self._http.send(request, stream=stream)
        seen: set[str] = set()

        async def trace(event: str, info: dict[str, Any]) -> None:
            seen.add(event)

        request.extensions["trace"] = trace
        try:
            return await self._http.send(request, stream=stream)
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
            if not wire.resend_after_race(
                reused=_NEW_CONNECTION not in seen, answered=_RESPONSE_STARTED in seen
            ):
                raise
        finally:
            request.extensions.pop("trace", None)
        self.stale_retries += 1
        if self._fresh is None:
            self._fresh = httpx.AsyncClient(
                base_url=self.base_url,
                timeout=self.timeout,
                headers=self._http.headers,
                verify=_tls(),
                limits=httpx.Limits(max_keepalive_connections=0),
            )
        return await self._fresh.send(request, stream=stream)

    async def _read(self, request: httpx.Request, seen: dict[str, int] | None = None) -> httpx.Response:
        """Send and read the whole body, at most max_body_bytes of it (WireError past that).
        `seen` gets the status as soon as the headers are in."""
        response = await self.send(request, stream=True)
        if seen is not None:
            seen["status"] = response.status_code
        try:
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > self.max_body_bytes:
                raise wire.over_cap("the response body", self.max_body_bytes)
            parts, size = [], 0
            async for part in response.aiter_bytes():
                size += len(part)
                if size > self.max_body_bytes:
                    raise wire.over_cap("the response body", self.max_body_bytes)
                parts.append(part)
            # what Response.aread does, with the cap: .content, .text and .json() read this
            response._content = b"".join(parts)
        finally:
            await response.aclose()
        return response

    async def get(
        self, path: str, *, timeout: float | None = None, seen: dict[str, int] | None = None
    ) -> httpx.Response:
        """GET `path`, its body read whole (up to the body cap). Raises httpx.TimeoutException
        when the whole request, connect to last byte, takes longer than the budget (so callers
        that catch httpx.HTTPError handle it), WireError when the body is over the cap."""
        budget = timeout or self.timeout
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancellation that
            # lands as the inner request finishes (seen: bench's metrics sampler never stopping).
            request = self._http.build_request("GET", path, timeout=budget)
            async with asyncio.timeout(budget):
                return await self._read(request, seen)
        except TimeoutError:
            raise httpx.TimeoutException(f"GET {path} timed out after {budget:g} s") from None

    async def get_json(self, path: str, *, timeout: float | None = None) -> Any:
        """GET `path` as JSON (wire.loads: ValueError for a body that is not a sane document)."""
        response = await self.get(path, timeout=timeout)
        response.raise_for_status()
        return wire.loads(response.content)

    async def health(self, path: str = "/health", *, timeout: float | None = None) -> HealthAnswer:
        """One GET of a health path within `timeout` (connect to last byte); never raises. An
        answer whose body does not arrive whole in time (or is over the cap) has no status."""
        seen: dict[str, int] = {}
        try:
            response = await self.get(path, timeout=timeout, seen=seen)
        except httpx.ConnectError as exc:
            return HealthAnswer(error=f"{type(exc).__name__}: {exc or 'no answer'}", refused=True)
        except (httpx.HTTPError, WireError) as exc:
            why = f"{type(exc).__name__}: {exc or 'no answer'}"
            if "status" in seen:
                why = f"answered HTTP {seen['status']}, then its body did not arrive whole: {why}"
            return HealthAnswer(error=why, headers_status=seen.get("status"))
        return HealthAnswer(
            status=response.status_code, body=response.content[:300].decode("utf-8", "replace")
        )

    async def chat(
        self,
        payload: dict[str, Any],
        *,
        timeout: float | None = None,
        keep_chunks: bool | None = None,
        idle_timeout: float | None = None,
    ) -> ChatResult:
        """One chat completion; streams when payload['stream'] is true. Never raises for
        server faults: they land in ChatResult.error. `keep_chunks` overrides the client's
        setting for this call. `idle_timeout`: the longest wait for any byte (headers, or the
        next piece of a stream) before the request is failed; default: the whole budget."""
        budget = timeout or self.timeout
        http_timeout = httpx.Timeout(budget, read=min(idle_timeout, budget)) if idle_timeout else budget
        result = ChatResult(streamed=bool(payload.get("stream")), t_start=time.perf_counter())
        try:
            # The timeout bounds the whole request: httpx's timeout is per read, and a server that
            # trickles one byte a minute would otherwise never time out. (asyncio.timeout rather
            # than wait_for: see get.)
            async with asyncio.timeout(budget):
                if result.streamed:
                    keep = self.keep_chunks if keep_chunks is None else keep_chunks
                    await self._stream(payload, result, http_timeout, keep)
                else:
                    await self._complete(payload, result, http_timeout)
        except httpx.ReadTimeout:
            if idle_timeout and idle_timeout < budget:
                result.error = f"timed out: no byte for {idle_timeout:g} s (idle timeout)"
            else:
                result.error = f"timed out after {budget:g} s"
        except (TimeoutError, httpx.TimeoutException):
            result.error = f"timed out after {budget:g} s"
        except httpx.RemoteProtocolError as exc:
            # The server closed the connection mid-response: for a stream, say how far it got.
            got = f" after {result.chunks} chunks" if result.streamed else ""
            result.error = f"{'stream' if result.streamed else 'response'} dropped{got}: {exc}"
        except httpx.HTTPError as exc:
            result.error = f"{type(exc).__name__}: {exc or 'connection failed'}"
        except WireError as exc:
            result.error = f"response refused: {exc}"
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
            # ValueError: bad JSON (JSONDecodeError) or bad UTF-8 (UnicodeDecodeError).
            result.error = f"malformed response: {type(exc).__name__}: {exc}"
        result.t_end = time.perf_counter()
        result.ok = result.error is None
        return result

    async def _complete(
        self, payload: dict[str, Any], result: ChatResult, budget: float | httpx.Timeout
    ) -> None:
        request = self._http.build_request("POST", "/v1/chat/completions", json=payload, timeout=budget)
        response = await self._read(request)
        result.status = response.status_code
        if response.status_code != 200:
            result.error = f"HTTP {response.status_code}: {error_message(response.text)}"
            return
        body = wire.loads(response.content)
        result.raw = body
        result.model = body.get("model")
        result.usage = body.get("usage")
        choice = body["choices"][0]
        message = choice.get("message") or {}
        result.finish_reason = choice.get("finish_reason")
        result.content = message.get("content") or ""
        result.reasoning_content = message.get("reasoning_content") or ""
        for i, call in enumerate(message.get("tool_calls") or []):
            function = call.get("function") or {}
            index = call.get("index")
            if not isinstance(index, int) or isinstance(index, bool) or index < 0:
                index = i  # SGLang sends None (or -1) on non-streamed calls: the position is the index
            result.tool_calls.append(
                ToolCall(
                    index=index,
                    id=call.get("id"),
                    name=function.get("name"),
                    arguments=function.get("arguments") or "",
                    ids_seen=1 if call.get("id") else 0,
                )
            )
        now = time.perf_counter()
        if result.content or result.reasoning_content or result.tool_calls:
            result.t_first_token = result.t_first_answer = now

    async def _stream(
        self, payload: dict[str, Any], result: ChatResult, budget: float | httpx.Timeout, keep: bool
    ) -> None:
        # Bytes in, one ChatStream walks the events (the same walker as bench's own path); what
        # arrived is kept also when the request fails part-way.
        chunks: list[Any] | None = [] if keep else None
        result.raw = chunks
        stream = ChatStream(result) if chunks is None else KeptChatStream(result, chunks)
        body_ended = False
        request = self._http.build_request(
            "POST", "/v1/chat/completions", json=payload, timeout=budget, headers=_SSE_HEADERS
        )
        response = await self.send(request, stream=True)
        try:
            result.status = response.status_code
            if response.status_code != 200:
                parts, size = [], 0
                async for part in response.aiter_bytes():  # an error body, capped like any body
                    parts.append(part)
                    size += len(part)
                    if size > self.max_body_bytes:
                        break
                text = b"".join(parts)[: self.max_body_bytes].decode("utf-8", "replace")
                result.error = f"HTTP {response.status_code}: {error_message(text)}"
                return
            ctype = response.headers.get("content-type", "").partition(";")[0]
            if "text/event-stream" not in ctype:
                raise SSEError(
                    f"Expected response header Content-Type to contain 'text/event-stream', got {ctype!r}"
                )
            feed, left = stream.feed, self.max_stream_bytes
            async for data in response.aiter_bytes():
                left -= len(data)
                if left < 0:
                    raise wire.over_cap("the stream", self.max_stream_bytes)
                if feed(data, _perf()):  # one reading per network read: its events all arrived now
                    break
            else:
                body_ended = True
        finally:
            await response.aclose()
            stream.finish(body_ended=body_ended)


def run_sync(coro: Any) -> Any:
    """Run a coroutine from synchronous code (the CLI, simple callers)."""
    return asyncio.run(coro)
