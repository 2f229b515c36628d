"""Waiting for a server that is still loading, before qualify or bench send it anything; and the
one-shot health GET of synchronous code (`up`'s health wait, the watch's probe)."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .client import EndpointClient, HealthAnswer

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


async def wait_until_ready(
    endpoint: str | EndpointClient,
    *,
    health_path: str = "/health",
    timeout_s: float = READY_TIMEOUT_S,
    poll_s: float = 0.5,
    probe_timeout_s: float = 10.0,
    progress: Any = None,
    progress_every_s: float = 10.0,
    headers: dict[str, str] | None = None,
    timeout_name: str | None = None,
) -> Readiness:
    """Poll `health_path` until it answers 200 or `timeout_s` has passed. A refused connection
    (nothing listens while weights load) and a 503 (warming up) both mean "wait". `progress`,
    when given, is called with a line about every `progress_every_s` while waiting, which names
    `timeout_name` (the option that sets `timeout_s`) so a wrong address costs no one the whole
    wait without a way out. `headers`: the
    slot's Authorization header where it has an API key (SGLang 0.5.23 lets /health* through
    without one, utils/auth.py, but a profile may name another health path). `endpoint`: a URL,
    or an EndpointClient to wait through (its key and headers; `headers` is then not used)."""
    if isinstance(endpoint, EndpointClient):
        return await _wait(
            endpoint,
            health_path,
            timeout_s,
            poll_s,
            probe_timeout_s,
            progress,
            progress_every_s,
            timeout_name,
        )
    async with EndpointClient(endpoint, timeout=probe_timeout_s, headers=headers) as client:
        return await _wait(
            client, health_path, timeout_s, poll_s, probe_timeout_s, progress, progress_every_s, timeout_name
        )


async def _wait(
    client: EndpointClient,
    health_path: str,
    timeout_s: float,
    poll_s: float,
    probe_timeout_s: float,
    progress: Any,
    progress_every_s: float,
    timeout_name: str | None,
) -> Readiness:
    url = client.base_url
    started = time.monotonic()
    next_line = started + progress_every_s
    out = Readiness(ready=False, reachable=False, status=None, error=None, waited_s=0.0)
    while True:
        # each probe within what is left of the wait: a server that trickles its answer
        # cannot hold the wait past timeout_s
        left = timeout_s - (time.monotonic() - started)
        answer = await client.health(health_path, timeout=max(0.05, min(probe_timeout_s, left)))
        if answer.status is not None:
            out.reachable, out.status = True, answer.status
            if answer.status == 200:
                out.ready, out.error = True, None
                break
            out.error = f"GET {health_path} answered HTTP {answer.status}"
        elif answer.refused:
            out.error = f"connection refused or unreachable ({answer.error})"
        else:
            out.reachable = out.reachable or answer.reachable
            out.error = f"{answer.error} (GET {url}{health_path})"
        now = time.monotonic()
        if now - started >= timeout_s:
            break
        if progress is not None and now >= next_line:
            change = f"; {timeout_name} to wait less or more" if timeout_name else ""
            progress(
                f"waiting for {url} to become ready: {out.error} "
                f"({now - started:.0f} s of {timeout_s:g} s{change})"
            )
            next_line = now + progress_every_s
        await asyncio.sleep(min(poll_s, max(0.0, timeout_s - (now - started))))
    out.waited_s = round(time.monotonic() - started, 3)
    return out


def ready_timeout_for(profile: Any) -> float:
    """How long to wait for a profile's server when no --ready-timeout is given: its
    qualify.preflight.ready_timeout_s, else READY_TIMEOUT_S (qualify and bench wait alike)."""
    preflight = (getattr(profile, "qualify", None) or {}).get("preflight") or {}
    value = preflight.get("ready_timeout_s")
    return float(value) if value is not None else READY_TIMEOUT_S


def health_check(
    url: str, path: str, *, timeout: float, headers: dict[str, str] | None = None
) -> HealthAnswer:
    """One GET of `path` from synchronous code, within `timeout` from connect to last byte (a
    server that trickles its answer fails it at the deadline); never raises for the server."""

    async def once() -> HealthAnswer:
        async with EndpointClient(url, timeout=timeout, headers=headers) as client:
            return await client.health(path, timeout=timeout)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(once())
    # called from inside an event loop (a library user's): its own loop, in a thread of its own
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, once()).result()
