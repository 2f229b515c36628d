"""The sim's request log: one stderr line per request, as a container's log reads it."""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from deploytool.sim.faults import StreamDropped
from deploytool.sim.log import log


class RequestLog:
    """One stderr line per request: method, path, status, tokens, seconds (after the body is sent)."""

    def __init__(self, app: ASGIApp, enabled: bool = True) -> None:
        self.app = app
        self.enabled = enabled

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.enabled:
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status = 0

        async def record(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        outcome = ""
        try:
            await self.app(scope, receive, record)
        except BaseException as exc:
            outcome = " (stream dropped)" if is_drop(exc) else f" ({type(exc).__name__})"
            raise
        finally:
            state = scope.get("state") or {}
            tokens = state.get("sim_tokens")
            counts = f" prompt={tokens[0]} completion={tokens[1]}" if tokens else ""
            note = f" {state['sim_note']!r}" if state.get("sim_note") else ""
            log(
                f"{scope['method']} {scope['path']} {status}{counts} {time.monotonic() - started:.3f}s{outcome}{note}"
            )


def is_drop(exc: BaseException) -> bool:
    if isinstance(exc, StreamDropped):
        return True
    return any(is_drop(e) for e in getattr(exc, "exceptions", ()))
