"""Transcripts: what a suite sent and what came back, cut to a readable size for the report."""

from __future__ import annotations

from typing import Any

from ..server.client import ChatResult

# A transcript string longer than this is cut in the report (a needle prompt is ~1 MB of text).
TRANSCRIPT_TEXT_LIMIT = 2000
# Passing cases keep only a few transcripts per suite; failures are always kept (up to this many).
MAX_PASS_TRANSCRIPTS = 3
MAX_FAIL_TRANSCRIPTS = 50


def clip(value: Any, limit: int = TRANSCRIPT_TEXT_LIMIT) -> Any:
    """Cut long strings (anywhere in a JSON-like value) so a report stays readable."""
    if isinstance(value, str):
        if len(value) <= limit:
            return value
        return value[: limit // 2] + f" …[{len(value) - limit} characters cut]… " + value[-limit // 2 :]
    if isinstance(value, dict):
        return {k: clip(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [clip(v, limit) for v in value]
    return value


def request_summary(payload: dict[str, Any]) -> dict[str, Any]:
    """The request as sent, with images replaced by their size and tool schemas by their names."""

    def part(p: Any) -> Any:
        if isinstance(p, dict) and p.get("type") == "image_url":
            url = (p.get("image_url") or {}).get("url", "")
            return {"type": "image_url", "url": f"{url[:40]}… ({len(url)} characters)"}
        return p

    messages = []
    for m in payload.get("messages", []):
        m = dict(m)
        if isinstance(m.get("content"), list):
            m["content"] = [part(p) for p in m["content"]]
        messages.append(m)
    out = {k: v for k, v in payload.items() if k not in ("messages", "tools")}
    out["messages"] = messages
    if payload.get("tools"):
        out["tools"] = [t.get("function", {}).get("name") for t in payload["tools"]]
    return clip(out)


def transcript(
    case: str,
    payload: dict[str, Any] | None,
    result: ChatResult | None,
    *,
    passed: bool,
    problems: list[str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "case": case,
        "passed": passed,
        "problems": list(problems or []),
        "request": request_summary(payload) if payload is not None else None,
        "response": clip(result.summary()) if result is not None else None,
        **clip(extra),
    }


class TranscriptLog:
    """Keeps every failure (up to a cap) and the first few passes."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self._passes = 0
        self._fails = 0

    def add(self, item: dict[str, Any]) -> None:
        if item.get("passed"):
            self._passes += 1
            if self._passes <= MAX_PASS_TRANSCRIPTS:
                self.items.append(item)
        else:
            self._fails += 1
            if self._fails <= MAX_FAIL_TRANSCRIPTS:
                self.items.append(item)
