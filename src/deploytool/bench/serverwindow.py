"""The server's own counters around a measured phase, read from /metrics with SGLang's real
metric names (observability/metrics_collector.py in sglang 0.5.23): wait for an idle server
before the phase, and tell afterwards whether the server did more than the phase sent.

    wait = await wait_idle(client, timeout_s=120)        # running == 0 and queued == 0, bounded
    before = await snapshot(client)
    ... run the phase ...
    after = await snapshot(client)
    extra = counter_delta(before, after, REQUESTS) - sent  # > 0: leftover work ran meanwhile

(Issue 8 adds a general counter-window module with the same names; this one is bench's.)
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from typing import Any

from ..client import EndpointClient
from .server import parse_prometheus

RUNNING = "sglang:num_running_reqs"
QUEUED = "sglang:num_queue_reqs"
REQUESTS = "sglang:num_requests_total"  # counted when a request finishes (aborted ones too)
PROMPT_TOKENS = "sglang:prompt_tokens_total"
CACHED_TOKENS = "sglang:cached_tokens_total"  # labelled by cache_source: summed
GENERATION_TOKENS = "sglang:generation_tokens_total"


@dataclass
class IdleWait:
    idle: bool | None  # None: the server has no readable /metrics, so idleness is unknown
    waited_s: float
    running: float | None
    queued: float | None
    timeout_s: float

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(self).items()}


async def snapshot(client: EndpointClient, timeout: float = 5.0) -> dict[str, float] | None:
    try:
        response = await client.get("/metrics", timeout=timeout)
    except Exception:  # noqa: BLE001 - unreadable metrics: the checks say "unknown"
        return None
    if response.status_code != 200:
        return None
    return parse_prometheus(response.text)


async def wait_idle(client: EndpointClient, timeout_s: float, poll_s: float = 0.1) -> IdleWait:
    """Poll until the server reports no running and no queued request, at most timeout_s."""
    started = time.monotonic()
    while True:
        metrics = await snapshot(client)
        waited = time.monotonic() - started
        if metrics is None or RUNNING not in metrics:
            return IdleWait(None, waited, None, None, timeout_s)
        running, queued = metrics.get(RUNNING, 0.0), metrics.get(QUEUED, 0.0)
        if running == 0 and queued == 0:
            return IdleWait(True, waited, running, queued, timeout_s)
        if waited >= timeout_s:
            return IdleWait(False, waited, running, queued, timeout_s)
        await asyncio.sleep(poll_s)


def counter_delta(before: dict[str, float] | None, after: dict[str, float] | None, name: str) -> float | None:
    if not before or not after or name not in after:
        return None
    return after[name] - before.get(name, 0.0)
