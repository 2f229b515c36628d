"""A misbehaving server ends qualification quickly.

Three rules (docs/qualify.md, "A server that misbehaves"):

* **Idle timeout.** A request may go without a byte only as long as its prompt can explain:
  `idle_timeout_s` (queueing and start-up) + estimated prompt tokens / `min_prefill_tps`
  (+ max_tokens / `min_decode_tps` for a non-streamed request, whose first byte is its last).
  Past that it is a failed request, whatever the suite's whole-request budget says.
* **Breaker.** After `max_consecutive_failures` failed requests in a row of the same kind
  (timeout, connection, HTTP 5xx), the rest of that suite's requests are not sent: they come
  back at once as failures saying why, and the report counts them.
* **Health probe.** A suite that follows one where the server failed (or a failed preflight
  health check) starts with one tiny chat; when it fails twice, that suite is not run,
  and after `MAX_FAILED_PROBES` failed probes in a row no later suite is tried.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from ..server.client import ChatResult, EndpointClient, HealthAnswer, HttpResponse

MAX_FAILED_PROBES = 2  # failed health probes in a row before the remaining suites are not tried
CHARS_PER_TOKEN = 3.0  # a generous token estimate: more tokens, longer allowance


def failure_kind(result: ChatResult) -> str | None:
    """The kind of a server failure that counts toward the breaker, or None (a 4xx, a wrong
    answer or a malformed body is the suite's business, not a sign the server is gone)."""
    if result.error is None or result.error.startswith("not sent"):
        return None
    if result.status is not None and result.status >= 500:
        return "HTTP 5xx"
    if result.error.startswith("timed out"):
        return "timeout"
    if "dropped" in result.error or "Connect" in result.error or "connection" in result.error.lower():
        return "connection"
    return None


def idle_timeout(payload: dict[str, Any], settings: Any) -> float:
    """How long this request may go without a byte (see the module docstring)."""
    text = json.dumps(payload.get("messages") or [], ensure_ascii=False)
    prompt_tokens = len(text) / CHARS_PER_TOKEN
    idle = settings.idle_timeout_s + prompt_tokens / settings.min_prefill_tps
    if not payload.get("stream"):
        idle += (
            float(payload.get("max_tokens") or payload.get("max_completion_tokens") or 1024)
            / settings.min_decode_tps
        )
    return round(min(idle, settings.request_timeout_s), 1)


@dataclass
class Breaker:
    """Counts consecutive server failures of one kind across the whole run."""

    threshold: int = 3
    kind: str | None = None
    consecutive: int = 0
    tripped: str | None = None  # why the remaining requests of this suite are not sent
    not_sent: int = 0
    suspect: bool = False  # the server failed lately: the next suite probes first
    failed_probes: int = 0
    first_error: str | None = None
    log: list[str] = field(default_factory=list)

    def record(self, result: ChatResult) -> None:
        kind = failure_kind(result)
        if kind is None:
            if result.error is None:
                self.kind, self.consecutive, self.first_error = None, 0, None
            return
        self.suspect = True
        if kind != self.kind:
            self.kind, self.consecutive, self.first_error = kind, 0, result.error
        self.consecutive += 1
        if self.consecutive >= self.threshold and self.tripped is None:
            self.tripped = (
                f"{self.consecutive} consecutive failed requests ({kind}; first: "
                f"{self.first_error}), so the rest of this suite was not sent"
            )

    def start_suite(self, threshold: int) -> None:
        self.threshold = threshold
        self.tripped = None
        self.not_sent = 0

    def healthy(self) -> None:
        self.kind, self.consecutive, self.suspect, self.failed_probes = None, 0, False, 0


class GuardedClient:
    """The suite's view of the EndpointClient (a context.SuiteClient): idle timeouts on, requests
    not sent once the breaker tripped; health, JSON reads and the address are the client's."""

    def __init__(self, client: EndpointClient, breaker: Breaker, settings: Any) -> None:
        self._client = client
        self._breaker = breaker
        self._settings = settings

    @property
    def base_url(self) -> str:
        return self._client.base_url

    async def health(self, path: str = "/health", *, timeout: float | None = None) -> HealthAnswer:
        return await self._client.health(path, timeout=timeout)

    async def get_json(self, path: str, *, timeout: float | None = None) -> Any:
        return await self._client.get_json(path, timeout=timeout)

    async def get(self, path: str, *, timeout: float | None = None) -> HttpResponse:
        return await self._client.get(path, timeout=timeout)

    async def chat(
        self, payload: dict[str, Any], *, timeout: float | None = None, keep_chunks: bool | None = None
    ) -> ChatResult:
        if self._breaker.tripped:
            self._breaker.not_sent += 1
            now = time.perf_counter()
            return ChatResult(
                streamed=bool(payload.get("stream")),
                t_start=now,
                t_end=now,
                error=f"not sent: {self._breaker.tripped}",
            )
        settings = self._settings
        budget = timeout or settings.request_timeout_s
        idle = idle_timeout(payload, settings)
        result = await self._client.chat(
            payload, timeout=budget, keep_chunks=keep_chunks, idle_timeout=idle if idle < budget else None
        )
        self._breaker.record(result)
        return result


async def health_probe(client: EndpointClient, model: str | None, timeout_s: float) -> str | None:
    """One tiny non-streamed chat, tried twice; None when it answered, else why not. (Not a stream:
    a server that drops streams is broken, but its suites can still measure how.) Through the
    run's client, with the target's API key: a keyed server refuses a chat without it."""
    payload = {
        "model": model or "default",
        "stream": False,
        "max_tokens": 1,
        "temperature": 0,
        "messages": [{"role": "user", "content": "Reply with the word OK."}],
    }
    why = None
    for _ in range(2):
        result = await client.chat(payload, timeout=timeout_s, idle_timeout=timeout_s)
        if result.ok:
            return None
        why = result.error
    return f"health probe (a 1-token chat, {timeout_s:g} s budget, tried twice) failed: {why}"
