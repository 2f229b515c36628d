"""The one HTTP client deploytool uses to talk to an OpenAI-compatible (SGLang) endpoint.

qualify and bench both go through `EndpointClient`, so timing, SSE parsing, tool-call delta
assembly and error capture are written once. A request never raises for a server fault: it
returns a `ChatResult` whose `error` says what went wrong (timeout, HTTP status, dropped
stream, malformed SSE), so a suite can record the failure and go on with the next case.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from httpx_sse import SSEError, aconnect_sse


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
    chunk_times: list[float] = field(default_factory=list)  # arrival of each token-bearing chunk
    saw_done: bool = False
    raw: Any = None  # the non-streamed body, or the list of streamed chunk objects

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


class EndpointClient:
    """Async client for one endpoint. Use as `async with EndpointClient(url) as c:`."""

    def __init__(self, base_url: str, *, timeout: float = 60.0, max_connections: int = 256):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout, limits=limits)

    async def __aenter__(self) -> "EndpointClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def get(self, path: str, *, timeout: float | None = None) -> httpx.Response:
        return await self._http.get(path, timeout=timeout or self.timeout)

    async def get_json(self, path: str, *, timeout: float | None = None) -> Any:
        response = await self.get(path, timeout=timeout)
        response.raise_for_status()
        return response.json()

    async def chat(self, payload: dict[str, Any], *, timeout: float | None = None) -> ChatResult:
        """One chat completion; streams when payload['stream'] is true. Never raises for
        server faults: they land in ChatResult.error."""
        budget = timeout or self.timeout
        result = ChatResult(streamed=bool(payload.get("stream")), t_start=time.perf_counter())
        try:
            # wait_for bounds the whole request: httpx's timeout is per read, and a server that
            # trickles one byte a minute would otherwise never time out.
            if result.streamed:
                await asyncio.wait_for(self._stream(payload, result, budget), budget)
            else:
                await asyncio.wait_for(self._complete(payload, result, budget), budget)
        except (asyncio.TimeoutError, httpx.TimeoutException):
            result.error = f"timed out after {budget:g} s"
        except httpx.RemoteProtocolError as exc:
            # The server closed the connection mid-response: for a stream, say how far it got.
            got = f" after {len(result.raw)} chunks" if result.streamed and isinstance(result.raw, list) else ""
            result.error = f"{'stream' if result.streamed else 'response'} dropped{got}: {exc}"
        except httpx.HTTPError as exc:
            result.error = f"{type(exc).__name__}: {exc or 'connection failed'}"
        except (SSEError, json.JSONDecodeError, KeyError, TypeError, IndexError) as exc:
            result.error = f"malformed response: {type(exc).__name__}: {exc}"
        result.t_end = time.perf_counter()
        result.ok = result.error is None
        return result

    async def _complete(self, payload: dict[str, Any], result: ChatResult, budget: float) -> None:
        response = await self._http.post("/v1/chat/completions", json=payload, timeout=budget)
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
            result.tool_calls.append(
                ToolCall(
                    index=call.get("index", i),
                    id=call.get("id"),
                    name=function.get("name"),
                    arguments=function.get("arguments") or "",
                    ids_seen=1 if call.get("id") else 0,
                )
            )
        now = time.perf_counter()
        if result.content or result.reasoning_content or result.tool_calls:
            result.t_first_token = result.t_first_answer = now

    async def _stream(self, payload: dict[str, Any], result: ChatResult, budget: float) -> None:
        chunks: list[Any] = []
        result.raw = chunks
        calls: dict[int, ToolCall] = {}
        async with aconnect_sse(
            self._http, "POST", "/v1/chat/completions", json=payload, timeout=budget
        ) as source:
            response = source.response
            result.status = response.status_code
            if response.status_code != 200:
                text = (await response.aread()).decode("utf-8", "replace")
                result.error = f"HTTP {response.status_code}: {_error_message(text)}"
                return
            async for event in source.aiter_sse():
                if event.data.strip() == "[DONE]":
                    result.saw_done = True
                    break
                chunk = json.loads(event.data)
                chunks.append(chunk)
                if chunk.get("object") == "error" or "error" in chunk and "choices" not in chunk:
                    result.error = f"error event in stream: {_error_message(event.data)}"
                    return
                self._apply_chunk(chunk, result, calls, time.perf_counter())
        result.tool_calls = [calls[i] for i in sorted(calls)]
        if not result.saw_done:
            result.error = f"stream ended without [DONE] after {len(chunks)} chunks"

    @staticmethod
    def _apply_chunk(chunk: dict[str, Any], result: ChatResult, calls: dict[int, ToolCall], now: float) -> None:
        if chunk.get("usage"):
            result.usage = chunk["usage"]
        result.model = chunk.get("model") or result.model
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            token_bearing = False
            if delta.get("reasoning_content"):
                result.reasoning_content += delta["reasoning_content"]
                token_bearing = True
            if delta.get("content"):
                result.content += delta["content"]
                token_bearing = True
                if result.t_first_answer is None:
                    result.t_first_answer = now
            for piece in delta.get("tool_calls") or []:
                index = piece.get("index", 0)
                call = calls.setdefault(index, ToolCall(index=index))
                if piece.get("id") and piece["id"] != call.id:
                    call.ids_seen += 1
                    call.id = piece["id"]
                function = piece.get("function") or {}
                if function.get("name"):
                    call.name = function["name"]
                call.arguments += function.get("arguments") or ""
                token_bearing = True
                if result.t_first_answer is None:
                    result.t_first_answer = now
            if token_bearing:
                result.chunk_times.append(now)
                if result.t_first_token is None:
                    result.t_first_token = now
            if choice.get("finish_reason"):
                result.finish_reason = choice["finish_reason"]


def _error_message(text: str) -> str:
    """The server's own error message from an OpenAI/SGLang error body, else the text."""
    try:
        body = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return text.strip()[:300]
    if isinstance(body, dict):
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        return str(inner.get("message") or body)[:300]
    return str(body)[:300]


def run_sync(coro: Any) -> Any:
    """Run a coroutine from synchronous code (the CLI, simple callers)."""
    return asyncio.run(coro)
