"""The one HTTP client deploytool uses to talk to an OpenAI-compatible (SGLang) endpoint.

qualify and bench both go through `EndpointClient` (bench streams through its own transport,
bench/stream.py, with the same walker, chat_stream.py), so timing, SSE parsing, tool-call delta
assembly and error capture are written once. A request never raises for a server fault: it
returns a `ChatResult` whose `error` says what went wrong (timeout, HTTP status, dropped
stream, malformed SSE), so a suite can record the failure and go on with the next case.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from .chat_result import ChatResult, ToolCall, error_message
from .chat_stream import ChatStream, KeptChatStream

_perf = time.perf_counter
_SSE_HEADERS = {"Accept": "text/event-stream", "Cache-Control": "no-store"}


class SSEError(httpx.TransportError):
    """The response is not an event stream (wrong Content-Type)."""


# How long an idle connection is kept for reuse. SGLang serves through uvicorn with
# timeout_keep_alive = SGLANG_TIMEOUT_KEEP_ALIVE, 5 s by default (sglang/srt/environ.py,
# entrypoints/http_server.py), and httpx's own default expiry is also 5 s: a request sent on a
# connection the server is closing at that very moment ends "Server disconnected without sending
# a response". Expiring well before the server does keeps the client off that edge.
KEEPALIVE_EXPIRY_S = 2.0

# Trace events (httpcore) that tell whether a request opened its own connection and whether any
# of the response arrived.
_NEW_CONNECTION = "connection.connect_tcp.started"
_RESPONSE_STARTED = "http11.receive_response_headers.complete"


class EndpointClient:
    """Async client for one endpoint. Use as `async with EndpointClient(url) as c:`.

    A request that fails before any response byte arrived on a *reused* connection is sent once
    more on a fresh connection: the server closed that idle connection as the request went out,
    so it never processed it (the keep-alive race). Any other failure stays a failure.
    """

    def __init__(self, base_url: str, *, timeout: float = 60.0, max_connections: int = 256,
                 keep_chunks: bool = False, api_key: str | None = None,
                 keepalive_expiry: float = KEEPALIVE_EXPIRY_S, retry_stale_connections: bool = True):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        # Keep every streamed chunk dict in ChatResult.raw (costs memory and CPU per token).
        self.keep_chunks = keep_chunks
        self.retry_stale_connections = retry_stale_connections
        self.stale_retries = 0  # requests re-sent after the keep-alive race (reported by callers)
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections,
                              keepalive_expiry=keepalive_expiry)
        # A server started with an API key wants `Authorization: Bearer KEY` on every call (the
        # fresh-connection client of the stale-connection retry copies these headers).
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout, limits=limits, headers=headers)
        self._fresh: httpx.AsyncClient | None = None  # no keep-alive: every request its own connection

    async def __aenter__(self) -> "EndpointClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()
        if self._fresh is not None:
            await self._fresh.aclose()

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
            if _NEW_CONNECTION in seen or _RESPONSE_STARTED in seen:
                raise  # a fresh connection, or the server had started answering: a real failure
        finally:
            request.extensions.pop("trace", None)
        self.stale_retries += 1
        if self._fresh is None:
            self._fresh = httpx.AsyncClient(base_url=self.base_url, timeout=self.timeout,
                                            headers=self._http.headers,
                                            limits=httpx.Limits(max_keepalive_connections=0))
        return await self._fresh.send(request, stream=stream)

    async def get(self, path: str, *, timeout: float | None = None) -> httpx.Response:
        """GET `path`; raises httpx.TimeoutException when the whole request (not only one read)
        takes longer than the budget, so callers that catch httpx.HTTPError handle it."""
        budget = timeout or self.timeout
        try:
            # As in chat: httpx's timeout is per read, so a server that trickles bytes never times out.
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancellation that
            # lands as the inner request finishes (seen: bench's metrics sampler never stopping).
            request = self._http.build_request("GET", path, timeout=budget)
            async with asyncio.timeout(budget):
                return await self.send(request)
        except asyncio.TimeoutError:
            raise httpx.TimeoutException(f"GET {path} timed out after {budget:g} s") from None

    async def get_json(self, path: str, *, timeout: float | None = None) -> Any:
        response = await self.get(path, timeout=timeout)
        response.raise_for_status()
        return response.json()

    async def chat(self, payload: dict[str, Any], *, timeout: float | None = None,
                   keep_chunks: bool | None = None, idle_timeout: float | None = None) -> ChatResult:
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
        except (asyncio.TimeoutError, httpx.TimeoutException):
            result.error = f"timed out after {budget:g} s"
        except httpx.RemoteProtocolError as exc:
            # The server closed the connection mid-response: for a stream, say how far it got.
            got = f" after {result.chunks} chunks" if result.streamed else ""
            result.error = f"{'stream' if result.streamed else 'response'} dropped{got}: {exc}"
        except httpx.HTTPError as exc:
            result.error = f"{type(exc).__name__}: {exc or 'connection failed'}"
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
            # ValueError: bad JSON (JSONDecodeError) or bad UTF-8 (UnicodeDecodeError).
            result.error = f"malformed response: {type(exc).__name__}: {exc}"
        result.t_end = time.perf_counter()
        result.ok = result.error is None
        return result

    async def _complete(self, payload: dict[str, Any], result: ChatResult, budget: float | httpx.Timeout) -> None:
        request = self._http.build_request("POST", "/v1/chat/completions", json=payload, timeout=budget)
        response = await self.send(request)
        result.status = response.status_code
        if response.status_code != 200:
            result.error = f"HTTP {response.status_code}: {error_message(response.text)}"
            return
        body = response.json()
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

    async def _stream(self, payload: dict[str, Any], result: ChatResult, budget: float | httpx.Timeout,
                      keep: bool) -> None:
        # Bytes in, one ChatStream walks the events (the same walker as bench's own path); what
        # arrived is kept also when the request fails part-way.
        chunks: list[Any] | None = [] if keep else None
        result.raw = chunks
        stream = ChatStream(result) if chunks is None else KeptChatStream(result, chunks)
        body_ended = False
        request = self._http.build_request("POST", "/v1/chat/completions", json=payload, timeout=budget,
                                           headers=_SSE_HEADERS)
        response = await self.send(request, stream=True)
        try:
            result.status = response.status_code
            if response.status_code != 200:
                text = (await response.aread()).decode("utf-8", "replace")
                result.error = f"HTTP {response.status_code}: {error_message(text)}"
                return
            ctype = response.headers.get("content-type", "").partition(";")[0]
            if "text/event-stream" not in ctype:
                raise SSEError(f"Expected response header Content-Type to contain 'text/event-stream', got {ctype!r}")
            feed = stream.feed
            async for data in response.aiter_bytes():
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
