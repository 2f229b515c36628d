"""SGLang's API-key check, as the reference runtime applies it, so callers can
prove they send the key where SGLang wants it.

Mirrors sglang 0.5.23 sglang/srt/utils/auth.py: `decide_request_auth` at the NORMAL level
(every route the simulator has is NORMAL) and `add_api_key_middleware`'s refusal, an
ORJSONResponse of {"error": "Unauthorized"} with status 401. OPTIONS and paths starting with
/health, /ready or /metrics pass without a key (probes and Prometheus); the token is compared
in constant time; the scheme is matched case-insensitively ("bearer KEY" passes).
tests/test_api_key_access.py runs SGLang's own decide_request_auth against this one.
"""

from __future__ import annotations

import secrets

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

OPEN_PREFIXES = ("/health", "/ready", "/metrics")


def allowed(method: str, path: str, authorization: str | None, api_key: str | None) -> bool:
    if not api_key or method == "OPTIONS" or path.startswith(OPEN_PREFIXES):
        return True
    if not authorization:
        return False
    parts = authorization.split(" ", 1)
    if len(parts) != 2 or parts[0].lower() != "bearer":
        return False
    return secrets.compare_digest(parts[1], api_key)


class ApiKeyAuth:
    """ASGI middleware: refuse a call without the right `Authorization: Bearer KEY`."""

    def __init__(self, app: ASGIApp, api_key: str | None) -> None:
        self.app, self.api_key = app, api_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.api_key:
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            if not allowed(scope["method"], scope["path"], headers.get("authorization"), self.api_key):
                await JSONResponse({"error": "Unauthorized"}, status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)
