"""The one HTTP client deploytool uses to talk to an OpenAI-compatible (SGLang) endpoint.

qualify and bench both go through `EndpointClient`, so timing, SSE parsing, tool-call delta
assembly and error capture are written once. A request never raises for a server fault: it
returns a `ChatResult` whose `error` says what went wrong (timeout, HTTP status, dropped
stream, malformed SSE), so a suite can record the failure and go on with the next case.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

_loads = json.loads
# The C scanner under json.loads: one call per event instead of loads -> decode -> raw_decode
# (that wrapper costs as much as the parsing for a small chunk). Failures fall back to loads.
_scan = json.JSONDecoder().scan_once
_perf = time.perf_counter
_utf8 = codecs.getincrementaldecoder("utf-8")
_SSE_HEADERS = {"Accept": "text/event-stream", "Cache-Control": "no-store"}


class SSEError(httpx.TransportError):
    """The response is not an event stream (wrong Content-Type)."""


@dataclass
class ToolCall:
    """One assembled tool call. `arguments` is the raw JSON text as the server sent it."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""
    # Streaming only: how many distinct ids arrived for this index (the contract wants 1).
    ids_seen: int = 0

    def parsed_arguments(self) -> Any:
        """The arguments as JSON, or raise ValueError naming the call when they are not."""
        try:
            return json.loads(self.arguments or "{}")
        except json.JSONDecodeError as exc:
            raise ValueError(f"tool call {self.name!r} has arguments that are not JSON: {exc}") from exc

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "id": self.id, "name": self.name, "arguments": self.arguments}


@dataclass
class ChatResult:
    """What one chat completion returned, with client-side timestamps (time.perf_counter())."""

    ok: bool = False
    status: int | None = None
    error: str | None = None
    streamed: bool = False
    content: str = ""
    reasoning_content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    model: str | None = None
    # Timing, all perf_counter seconds; None when the event never happened.
    t_start: float = 0.0
    t_first_token: float | None = None  # first reasoning_content or content chunk
    t_first_answer: float | None = None  # first content (answer) chunk
    t_end: float = 0.0
    # Arrival of each token-bearing chunk: the instant the network read that carried it returned
    # (chunks that came in one read share it, so client parsing time never counts as server time).
    chunk_times: list[float] = field(default_factory=list)
    saw_done: bool = False
    # The non-streamed body; for a stream, the list of chunk objects only when the client was
    # asked to keep them (EndpointClient(keep_chunks=True) or chat(..., keep_chunks=True)), else None.
    raw: Any = None
    chunks: int = 0  # streamed: JSON chunks received (data events other than [DONE])
    reasoning_chunks: int = 0  # streamed: choice deltas carrying reasoning_content
    answer_chunks: int = 0  # streamed: choice deltas carrying content or tool calls

    @property
    def ttft(self) -> float | None:
        return None if self.t_first_token is None else self.t_first_token - self.t_start

    @property
    def latency(self) -> float:
        return self.t_end - self.t_start

    @property
    def prompt_tokens(self) -> int | None:
        return (self.usage or {}).get("prompt_tokens")

    @property
    def completion_tokens(self) -> int | None:
        return (self.usage or {}).get("completion_tokens")

    @property
    def cached_tokens(self) -> int | None:
        details = (self.usage or {}).get("prompt_tokens_details") or {}
        return details.get("cached_tokens")

    def summary(self) -> dict[str, Any]:
        """A JSON-able transcript of the response, for reports."""
        return {
            "ok": self.ok,
            "status": self.status,
            "error": self.error,
            "streamed": self.streamed,
            "finish_reason": self.finish_reason,
            "content": self.content,
            "reasoning_content": self.reasoning_content,
            "tool_calls": [c.to_dict() for c in self.tool_calls],
            "usage": self.usage,
            "ttft_s": self.ttft,
            "latency_s": round(self.latency, 6),
            "saw_done": self.saw_done,
        }


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
        # issue 13: a server started with an API key wants `Authorization: Bearer KEY` on every call
        # (the fresh-connection client of the stale-connection retry copies these headers).
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
            result.error = f"HTTP {response.status_code}: {_error_message(response.text)}"
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
        # The hot path: one pass per network read, one json.loads per event, fragments collected
        # in lists and joined once. SSE is parsed here from the raw bytes (events end at a blank
        # line; CRLF and CR are normalised; comments and non-data fields are skipped).
        chunks: list[Any] | None = [] if keep else None
        result.raw = chunks
        calls: dict[int, ToolCall] = {}
        arguments: dict[int, list[str]] = {}
        content: list[str] = []
        reasoning: list[str] = []
        times = result.chunk_times
        t_token = t_answer = model = None
        n = n_reasoning = n_answer = 0
        ended = False
        request = self._http.build_request("POST", "/v1/chat/completions", json=payload, timeout=budget,
                                           headers=_SSE_HEADERS)
        response = await self.send(request, stream=True)
        try:
            result.status = response.status_code
            if response.status_code != 200:
                text = (await response.aread()).decode("utf-8", "replace")
                result.error = f"HTTP {response.status_code}: {_error_message(text)}"
                return
            ctype = response.headers.get("content-type", "").partition(";")[0]
            if "text/event-stream" not in ctype:
                raise SSEError(f"Expected response header Content-Type to contain 'text/event-stream', got {ctype!r}")
            decode = _utf8("replace").decode  # a character split across two reads is joined
            buf = ""
            async for data in response.aiter_bytes():
                now = _perf()  # one reading per network read: its events all arrived now
                buf = buf + decode(data) if buf else decode(data)
                if "\r" in buf:
                    buf = _lf(buf)
                if "\n\n" not in buf:
                    continue
                events = buf.split("\n\n")
                buf = events.pop()
                for event in events:
                    if event[:6] == "data: " and "\n" not in event:  # the usual one-line event
                        if event == "data: [DONE]":
                            result.saw_done = ended = True
                            return
                        try:
                            chunk, end = _scan(event, 6)
                            if end != len(event):
                                raise StopIteration
                        except StopIteration:  # not one JSON value: [DONE] with blanks, or loads says why
                            event = event[6:]
                            if event.strip() == "[DONE]":
                                result.saw_done = ended = True
                                return
                            chunk = _loads(event)
                    else:
                        event = _event_data(event)
                        if event is None:
                            continue
                        if event.strip() == "[DONE]":
                            result.saw_done = ended = True
                            return
                        chunk = _loads(event)
                    n += 1
                    if chunks is not None:
                        chunks.append(chunk)
                    if chunk.get("object") == "error" or "error" in chunk and "choices" not in chunk:
                        result.error = f"error event in stream: {_body_message(chunk)}"
                        return
                    if chunk.get("usage"):
                        result.usage = chunk["usage"]
                    model = chunk.get("model") or model
                    for choice in chunk.get("choices") or ():
                        delta = choice.get("delta")
                        if delta:
                            token = False
                            text = delta.get("reasoning_content")
                            if text:
                                reasoning.append(text)
                                n_reasoning += 1
                                token = True
                            text = delta.get("content")
                            answer = False
                            if text:
                                content.append(text)
                                answer = True
                            pieces = delta.get("tool_calls")
                            if pieces:
                                _apply_tool_calls(pieces, calls, arguments)
                                answer = True
                            if answer:
                                n_answer += 1
                                token = True
                                if t_answer is None:
                                    t_answer = now
                            if token:
                                times.append(now)
                                if t_token is None:
                                    t_token = now
                        if choice.get("finish_reason"):
                            result.finish_reason = choice["finish_reason"]
            ended = True
        finally:
            await response.aclose()
            # Also on an error or a timeout: what arrived is kept.
            result.content = "".join(content)
            result.reasoning_content = "".join(reasoning)
            result.t_first_token, result.t_first_answer = t_token, t_answer
            result.model = model or result.model
            result.chunks, result.reasoning_chunks, result.answer_chunks = n, n_reasoning, n_answer
            if ended:  # tool calls are reported when the stream ended, [DONE] or not
                for index, call in calls.items():
                    call.arguments = "".join(arguments[index])
                result.tool_calls = [calls[i] for i in sorted(calls)]
        if not result.saw_done and result.error is None:
            result.error = f"stream ended without [DONE] after {n} chunks"

    @staticmethod
    def _apply_chunk(chunk: dict[str, Any], result: ChatResult, calls: dict[int, ToolCall], now: float) -> None:
        """Apply one streamed chunk to `result`: the per-chunk form of what `_stream` does inline
        (same rules), for callers that hold chunk objects already."""
        if chunk.get("usage"):
            result.usage = chunk["usage"]
        result.model = chunk.get("model") or result.model
        result.chunks += 1
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            token_bearing = answer = False
            if delta.get("reasoning_content"):
                result.reasoning_content += delta["reasoning_content"]
                result.reasoning_chunks += 1
                token_bearing = True
            if delta.get("content"):
                result.content += delta["content"]
                answer = True
            if delta.get("tool_calls"):
                _apply_tool_calls(delta["tool_calls"], calls, None)
                answer = True
            if answer:
                result.answer_chunks += 1
                token_bearing = True
                if result.t_first_answer is None:
                    result.t_first_answer = now
            if token_bearing:
                result.chunk_times.append(now)
                if result.t_first_token is None:
                    result.t_first_token = now
            if choice.get("finish_reason"):
                result.finish_reason = choice["finish_reason"]


def _apply_tool_calls(pieces: list[dict[str, Any]], calls: dict[int, ToolCall],
                      arguments: dict[int, list[str]] | None) -> None:
    """Tool-call deltas, assembled per index. With `arguments`, each call's argument fragments
    are collected there (joined by the caller at the end); without, appended to the call."""
    for piece in pieces:
        index = piece.get("index", 0)
        call = calls.get(index)
        if call is None:
            call = calls[index] = ToolCall(index=index)
            if arguments is not None:
                arguments[index] = []
        if piece.get("id") and piece["id"] != call.id:
            call.ids_seen += 1
            call.id = piece["id"]
        function = piece.get("function") or {}
        if function.get("name"):
            call.name = function["name"]
        if function.get("arguments"):
            if arguments is None:
                call.arguments += function["arguments"]
            else:
                arguments[index].append(function["arguments"])


def _lf(buf: str) -> str:
    """CRLF and lone CR line ends as LF. A trailing CR is kept as is: its LF may be in the next read."""
    if buf[-1] == "\r":
        return buf[:-1].replace("\r\n", "\n").replace("\r", "\n") + "\r"
    return buf.replace("\r\n", "\n").replace("\r", "\n")


def _event_data(event: str) -> str | None:
    """The data of one SSE event (its data lines joined by LF), or None when it has none
    (comments such as keep-alives, or only event:/id:/retry: fields)."""
    data = []
    for line in event.split("\n"):
        if line[:4] == "data":
            name, _, value = line.partition(":")
            if name == "data":
                data.append(value[1:] if value[:1] == " " else value)
    return "\n".join(data) if data else None


def _error_message(text: str) -> str:
    """The server's own error message from an OpenAI/SGLang error body, else the text."""
    try:
        body = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return text.strip()[:300]
    return _body_message(body)


def _body_message(body: Any) -> str:
    if isinstance(body, dict):
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        return str(inner.get("message") or body)[:300]
    return str(body)[:300]


# How long qualify and bench wait for a server that is still loading (refusing connections, or
# answering 503 while it warms up): SGLang listens only once its weights are loaded and the
# scheduler is ready, which takes minutes for a large model (sglang/srt/entrypoints/http_server.py).
READY_TIMEOUT_S = 1200.0


@dataclass
class Readiness:
    ready: bool
    reachable: bool  # something answered HTTP at all
    status: int | None  # the last health status
    error: str | None  # the last reason it was not ready
    waited_s: float


async def wait_until_ready(base_url: str, *, health_path: str = "/health", timeout_s: float = READY_TIMEOUT_S,
                           poll_s: float = 0.5, probe_timeout_s: float = 10.0,
                           progress: Any = None, progress_every_s: float = 10.0,
                           headers: dict[str, str] | None = None) -> Readiness:
    """Poll `health_path` until it answers 200 or `timeout_s` has passed. A refused connection
    (nothing listens while weights load) and a 503 (warming up) both mean "wait". `progress`,
    when given, is called with a line about every `progress_every_s` while waiting. `headers`: the
    slot's Authorization header where it has an API key (SGLang 0.5.23 lets /health* through
    without one, utils/auth.py, but a profile may name another health path)."""
    url = base_url.rstrip("/")
    started = time.monotonic()
    next_line = started + progress_every_s
    out = Readiness(ready=False, reachable=False, status=None, error=None, waited_s=0.0)
    async with httpx.AsyncClient(base_url=url, timeout=probe_timeout_s, headers=headers) as http:
        while True:
            try:
                response = await http.get(health_path)
                out.reachable, out.status = True, response.status_code
                if response.status_code == 200:
                    out.ready, out.error = True, None
                    break
                out.error = f"GET {health_path} answered HTTP {response.status_code}"
            except httpx.ConnectError as exc:
                out.error = f"connection refused or unreachable ({type(exc).__name__}: {exc or 'no answer'})"
            except httpx.HTTPError as exc:
                out.error = f"{type(exc).__name__}: {exc or 'no answer'} (GET {url}{health_path})"
            now = time.monotonic()
            if now - started >= timeout_s:
                break
            if progress is not None and now >= next_line:
                progress(f"waiting for {url} to become ready: {out.error} "
                         f"({now - started:.0f} s of {timeout_s:g} s)")
                next_line = now + progress_every_s
            await asyncio.sleep(min(poll_s, max(0.0, timeout_s - (now - started))))
    out.waited_s = round(time.monotonic() - started, 3)
    return out


def run_sync(coro: Any) -> Any:
    """Run a coroutine from synchronous code (the CLI, simple callers)."""
    return asyncio.run(coro)
