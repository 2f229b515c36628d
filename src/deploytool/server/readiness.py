"""Waiting for a server that is still loading, before qualify or bench send it anything."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import httpx


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
                           headers: dict[str, str] | None = None, timeout_name: str | None = None) -> Readiness:
    """Poll `health_path` until it answers 200 or `timeout_s` has passed. A refused connection
    (nothing listens while weights load) and a 503 (warming up) both mean "wait". `progress`,
    when given, is called with a line about every `progress_every_s` while waiting, which names
    `timeout_name` (the option that sets `timeout_s`) so a wrong address costs no one the whole
    wait without a way out. `headers`: the
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
                change = f"; {timeout_name} to wait less or more" if timeout_name else ""
                progress(f"waiting for {url} to become ready: {out.error} "
                         f"({now - started:.0f} s of {timeout_s:g} s{change})")
                next_line = now + progress_every_s
            await asyncio.sleep(min(poll_s, max(0.0, timeout_s - (now - started))))
    out.waited_s = round(time.monotonic() - started, 3)
    return out


def ready_timeout_for(profile: Any) -> float:
    """How long to wait for a profile's server when no --ready-timeout is given: its
    qualify.preflight.ready_timeout_s, else READY_TIMEOUT_S (qualify and bench wait alike)."""
    preflight = ((getattr(profile, "qualify", None) or {}).get("preflight") or {})
    value = preflight.get("ready_timeout_s")
    return float(value) if value is not None else READY_TIMEOUT_S
