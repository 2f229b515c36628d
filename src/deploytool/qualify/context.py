"""What a suite is handed: the context of its run, and requests sent under its concurrency bound.

`SuiteContext.send` is the one way a suite sends a chat request with its `concurrency` in
flight at most; `bounded(n)` gives a phase its own bound (the stress suite's probes), and
`Bounded.peak` says how many were in flight at once (a gate of the vision suite's photographs).

A context is typed by the settings of its suite: a suite's `run(ctx: SuiteContext[Settings])`
reads `ctx.settings` as its own Settings model, and `ctx.target` as the checks.targets.Target
being qualified (None when a test runs a suite on its own).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

from ..server.client import ChatResult, HealthAnswer, HttpResponse
from ..server.facts import ServerFacts

if TYPE_CHECKING:
    from ..checks.targets import Target
    from ..profiles import Profile

# the suite's Settings model (a suite_api.SuiteSettings; not imported here: suite_api imports this module)
SettingsT = TypeVar("SettingsT")


class SuiteClient(Protocol):
    """What a suite may ask of the server: the run's EndpointClient, or the guarded view of it the
    runner hands each suite (qualify/resilience.py: the suite's timeouts, the breaker's turn)."""

    @property
    def base_url(self) -> str: ...

    async def chat(
        self, payload: dict[str, Any], *, timeout: float | None = None, keep_chunks: bool | None = None
    ) -> ChatResult: ...

    async def health(self, path: str = "/health", *, timeout: float | None = None) -> HealthAnswer: ...

    async def get_json(self, path: str, *, timeout: float | None = None) -> Any: ...

    # a GET read whole (server/metrics_window.py reads /metrics through it)
    async def get(self, path: str, *, timeout: float | None = None) -> HttpResponse: ...


@runtime_checkable
class Concurrent(Protocol):
    """Settings of a suite that bounds its requests in flight: its `concurrency` setting."""

    @property
    def concurrency(self) -> int: ...


class Bounded:
    """Chat requests with at most `limit` in flight (None: no bound); counts the peak in flight."""

    def __init__(self, client: SuiteClient, limit: int | None) -> None:
        self.client = client
        self.limit = limit
        self._semaphore = asyncio.Semaphore(limit) if limit is not None else None
        self.now = 0
        self.peak = 0

    async def send(self, payload: dict[str, Any], *, keep_chunks: bool | None = None) -> ChatResult:
        if self._semaphore is None:
            return await self._counted(payload, keep_chunks)
        async with self._semaphore:
            return await self._counted(payload, keep_chunks)

    async def _counted(self, payload: dict[str, Any], keep_chunks: bool | None) -> ChatResult:
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            return await self.client.chat(payload, keep_chunks=keep_chunks)
        finally:
            self.now -= 1


@dataclass
class SuiteContext(Generic[SettingsT]):
    client: SuiteClient
    settings: SettingsT  # the suite's Settings instance
    server: ServerFacts
    profile: Profile | None
    target: Target | None
    limit: int | None = None
    previous_results: Path | None = None
    progress: Callable[[int | None, int | None], None] = lambda advance, total: None
    _started: float = field(default_factory=time.monotonic)
    _bound: Bounded | None = field(default=None, repr=False)

    async def send(self, payload: dict[str, Any], *, keep_chunks: bool | None = None) -> ChatResult:
        """One chat request under the suite's bound on requests in flight (its settings'
        `concurrency`; unbounded for a suite that has none)."""
        if self._bound is None:
            concurrency = self.settings.concurrency if isinstance(self.settings, Concurrent) else None
            self._bound = self.bounded(concurrency)
        return await self._bound.send(payload, keep_chunks=keep_chunks)

    def bounded(self, limit: int | None) -> Bounded:
        """A sender with its own bound on requests in flight (a phase that has its own concurrency)."""
        return Bounded(self.client, limit)

    def advance(self, n: int = 1) -> None:
        self.progress(n, None)

    def set_total(self, total: int) -> None:
        self.progress(None, total)

    @property
    def context_length(self) -> int | None:
        """The served context length: the server's word first, then the profile's."""
        measured = self.server.max_model_len
        if measured:
            return measured
        return self.profile.model.context_length if self.profile else None

    def apply_limit(self, items: list[Any]) -> tuple[list[Any], bool]:
        if self.limit is not None and self.limit < len(items):
            return items[: self.limit], True
        return items, False


def chat_payload(
    ctx: SuiteContext[Any],
    messages: list[dict[str, Any]],
    *,
    thinking: bool | None = None,
    stream: bool = False,
    max_tokens: int | None = None,
    temperature: float = 0.0,
    **extra: Any,
) -> dict[str, Any]:
    """A chat request as the gateway sends it: the served model name, greedy unless told,
    thinking set explicitly through chat_template_kwargs (None: the server's default)."""
    payload: dict[str, Any] = {
        "model": ctx.server.served_model_name
        or (ctx.profile.model.served_name if ctx.profile else "default"),
        "messages": messages,
        "temperature": temperature,
        "stream": stream,
    }
    if stream:
        payload["stream_options"] = {"include_usage": True}
    if max_tokens is not None:
        payload["max_tokens"] = max_tokens
    if thinking is not None:
        payload["chat_template_kwargs"] = {"enable_thinking": thinking}
    payload.update(extra)
    return payload
