"""Draining a release before it is stopped: wait until the server itself reports no running
and no queued request (SGLang's /metrics gauges sglang:num_running_reqs and
sglang:num_queue_reqs), bounded by the drain timeout.

The gateway's `pre-stop` hook takes the release out of the gateway first, so no new request
reaches it; what was already sent is counted by the server, not guessed with a sleep. A
request still running at the timeout is reported (it is cut by the stop), never silently.
A server without /metrics (SGLang serves it only with --enable-metrics) is not drained by
count, and the answer says so.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from typing import Any

from ..server.client import EndpointClient, run_sync
from ..server.metrics_window import QUEUED, RUNNING, snapshot

POLL_S = 0.2


@dataclass
class Drain:
    release: int
    timeout_s: float
    waited_s: float = 0.0
    at_start: int | None = None  # running + queued when the wait began (None: not counted)
    left: int | None = None  # still running or queued when the wait ended
    why: str | None = None  # why it was not counted

    @property
    def drained(self) -> bool:
        return self.left == 0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "drained": self.drained}

    def describe(self) -> str:
        if self.at_start is None:
            return f"release {self.release} not drained by count: {self.why}"
        if self.drained:
            return (
                f"release {self.release} drained: waited for {self.at_start} request(s) "
                f"for {self.waited_s:.1f} s"
            )
        return (
            f"release {self.release}: {self.left} request(s) still running or queued at the drain "
            f"timeout of {self.timeout_s:g} s (of {self.at_start} when the wait began): the stop cuts them"
        )


def drain(
    url: str, release: int, timeout_s: float, *, api_key: str | None = None, poll_s: float = POLL_S
) -> Drain:
    """Wait until the server at `url` reports nothing running and nothing queued, at most timeout_s."""
    return run_sync(_drain(url, release, timeout_s, api_key, poll_s))


async def _drain(url: str, release: int, timeout_s: float, api_key: str | None, poll_s: float) -> Drain:
    result = Drain(release=release, timeout_s=timeout_s)
    started = time.monotonic()
    async with EndpointClient(url, timeout=10.0, api_key=api_key) as client:
        while True:
            snap = await snapshot(client, timeout=5.0)
            result.waited_s = round(time.monotonic() - started, 2)
            gauges = snap.gauges or {}
            if snap.counters is None or RUNNING not in gauges:
                result.why = snap.why or f"/metrics has no {RUNNING}"
                return result
            left = int(gauges.get(RUNNING, 0) + gauges.get(QUEUED, 0))
            if result.at_start is None:
                result.at_start = left
            result.left = left
            if left == 0 or result.waited_s >= timeout_s:
                return result
            await asyncio.sleep(poll_s)
