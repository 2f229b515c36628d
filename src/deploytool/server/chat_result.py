"""What one chat completion returned, as qualify and bench read it: the text, reasoning, tool
calls, usage and client-side timestamps, or the error that ended it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from . import wire


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


def error_message(text: str) -> str:
    """The server's own error message from an OpenAI/SGLang error body, else the text (as sent:
    a body wire.loads refuses, a lone surrogate's escape say, is shown as its escape)."""
    try:
        body = wire.loads(text)
    except (ValueError, TypeError):  # not JSON, or JSON wire refuses (nested too deep, a lone surrogate)
        return text.strip()[:300]
    return body_message(body)


def body_message(body: Any) -> str:
    if isinstance(body, dict):
        error = body.get("error")
        inner = error if isinstance(error, dict) else body
        return str(inner.get("message") or body)[:300]
    return str(body)[:300]
