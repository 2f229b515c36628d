"""One request a workload asks the runner to send, and a job (a coroutine factory) that sends it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

Job = Callable[[], Awaitable[None]]


@dataclass
class Spec:
    phase: str
    group: str
    concurrency: int
    index: int
    prompt_tokens: int
    max_tokens: int
    conversation: int | None = None
    turn: int | None = None
    scheduled: float | None = None
