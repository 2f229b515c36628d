"""Hostile modes: the reference runtime as a server that attacks the client judging it, so tests can
prove every caller ends within its deadline, with a verdict, in bounded memory.

An ASGI middleware around the app (faults.py names the modes; `--fault trickle` and so on):

- script_text: every text value of every JSON body and SSE event carries a script (and markup that
  would close a <pre>), for the reports' escaping; the payload is taken out of requests again, so
  a client that sends the (scripted) model id back is still served.
- huge_body: every answer is a 1 GiB body, generated as it is sent (never held), chunked: a JSON
  string that never closes, or for a chat one SSE event that never ends.
- trickle: the real answer, its headers at once, then its body one byte every TRICKLE_S, then a
  space every TRICKLE_S without end.
- deep_json: every answer is JSON nested 100,000 deep (for a streamed chat: one such event).
- endless_sse: a streamed chat sends valid chunks as fast as it can and never [DONE].
- terminal_escapes: as script_text, with terminal control sequences (ESCAPES: OSC 52 writes the
  clipboard, OSC 0 sets the window title, cursor moves erase the lines above and print a fake
  verdict, a one-byte CSI, a bidi override, a newline that starts a forged line).
- rich_markup: as script_text, with rich markup (MARKUP: a live link, a stray closing tag).
- lone_surrogates: as script_text, with JSON escapes of lone surrogates (SURROGATES: no
  character; written through surrogateescape they are the bytes of U+202E and of U+009B, a CSI).
- infinity: every length a server states about itself (max_model_len, context_length, ...) is the
  number Infinity, which JSON does not have (Python's json writes and reads it).

What it writes to its log at start-up (`log_at_start`): terminal_escapes writes ESCAPES there too,
huge_log_line one line of HUGE_LOG_LINE bytes (written in pieces, as a process's buffered stderr
sends it), print_server_args its settings with the API key in clear, as SGLang logs its
`server_args=ServerArgs(..., api_key='...')` at start-up.

The health routes are served normally unless `hostile_health` is also given (then /health and
/health_generate are as hostile as the rest: a probe, a ready-wait, a watch).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from deploytool.sim.faults import FaultConfig
from deploytool.sim.log import log

SCRIPT = (
    '</pre></code><script>document.title="owned by the server"</script><img src=x onerror="document.title=1">'
)
ESCAPES = (
    "\x1b]52;c;b3duZWQgYnkgdGhlIHNlcnZlcg==\x07\x1b]0;owned by the server\x07"
    "\x1b[1A\x1b[2K\x1b[1A\x1b[2K\rqualify PASSED\x9b2J\x08\x08\u202eevil\u202c\x07"
    "\n2026-01-01 00:00:00Z  release.cutover        cpu           9  forged"
)
SURROGATES = "\udce2\udc80\udcae\udcc2\udc9b"  # E2 80 AE (U+202E), C2 9B (U+009B) as surrogateescape
MARKUP = "[link=https://example.invalid/owned]click here[/link] [bold green]qualify PASSED[/] [/x]"
_LENGTH_FIELDS = {
    "max_model_len",
    "context_length",
    "context_len",
    "max_total_num_tokens",
    "max_req_input_len",
}
HUGE_BYTES = 2**30
HUGE_LOG_LINE = 32 * 2**20
DEEP = 100_000
# A byte this often: far inside any read timeout a caller sets (a second or more), so only a
# deadline on the whole call ends it; short, so a test of that deadline waits seconds, not minutes.
TRICKLE_S = 0.25
# Fields of the wire protocol itself, kept as they are so the client still reads the shape.
_PROTOCOL_FIELDS = {"object", "role", "finish_reason", "type"}


def log_at_start(config: FaultConfig, api_key: str | None) -> None:
    if config.print_server_args:
        log(f"server_args=SimSettings(api_key={api_key!r}, faults={config.active!r})")
    if config.terminal_escapes:
        log(f"FAULT terminal_escapes: {ESCAPES}")
    if config.huge_log_line:
        log(f"FAULT huge_log_line: one line of {HUGE_LOG_LINE // 2**20} MiB follows")
        piece = "z" * 2**16
        for _ in range(HUGE_LOG_LINE // len(piece)):
            sys.stderr.write(piece)
        sys.stderr.write("\n")
        log("FAULT huge_log_line: after the long line")


class _ClientLeft(Exception):
    pass


class Hostile:
    def __init__(self, app: ASGIApp, config: FaultConfig) -> None:
        self.app, self.config = app, config
        self.active = any(
            (
                config.script_text,
                config.huge_body,
                config.trickle,
                config.deep_json,
                config.endless_sse,
                config.terminal_escapes,
                config.rich_markup,
                config.lone_surrogates,
                config.infinity,
            )
        )
        # what the text modes add to every text value (taken out of requests again)
        self.payload = (
            SCRIPT
            if config.script_text
            else ESCAPES
            if config.terminal_escapes
            else MARKUP
            if config.rich_markup
            else SURROGATES
            if config.lone_surrogates
            else None
        )
        # the payload as either JSON writer spells it in a request (escaped or not), made once
        self.spellings = (
            []
            if self.payload is None
            else [
                json.dumps(self.payload, ensure_ascii=ascii_only)[1:-1].encode("utf-8", "surrogatepass")
                for ascii_only in (True, False)
            ]
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        c = self.config
        if (
            scope["type"] != "http"
            or not self.active
            or (scope["path"].startswith("/health") and not c.hostile_health)
        ):
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive)
        stream = scope["path"] == "/v1/chat/completions" and _wants_stream(body)
        left = asyncio.Event()
        watcher = asyncio.create_task(_watch(receive, left))
        try:
            if c.huge_body:
                await _huge(send, stream, left)
            elif c.deep_json:
                await _deep(send, stream)
            elif c.endless_sse and stream:
                await _endless(send, left)
            else:
                for spelt in self.spellings:  # the payload taken out of the request again
                    body = body.replace(spelt, b"")
                out = send
                if c.trickle:
                    out = _trickling(out, left)
                if self.payload is not None:
                    payload = self.payload
                    out = _scripting(out, lambda value: _scripted(value, payload))
                elif c.infinity:
                    out = _scripting(out, _infinite)
                await self.app(scope, _replay(body, left), out)
        except _ClientLeft:
            pass
        finally:
            watcher.cancel()


async def _read_body(receive: Receive) -> bytes:
    parts = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(parts)


def _wants_stream(body: bytes) -> bool:
    try:
        return bool(json.loads(body).get("stream"))
    except (ValueError, AttributeError):
        return False


async def _watch(receive: Receive, left: asyncio.Event) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            left.set()
            return


def _replay(body: bytes, left: asyncio.Event) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await left.wait()
        return {"type": "http.disconnect"}

    return receive


def _start(content_type: str) -> Message:
    return {
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"content-type", content_type.encode())],
    }


async def _huge(send: Send, stream: bool, left: asyncio.Event) -> None:
    log(f"FAULT huge_body: a {HUGE_BYTES // 2**20} MiB {'event' if stream else 'body'}")
    await send(_start("text/event-stream" if stream else "application/json"))
    head = b'data: {"choices": [{"delta": {"content": "' if stream else b'{"object": "list", "data": "'
    await send({"type": "http.response.body", "body": head, "more_body": True})
    piece, sent = b"a" * 2**20, len(head)
    while sent < HUGE_BYTES and not left.is_set():
        await send({"type": "http.response.body", "body": piece, "more_body": True})
        sent += len(piece)
        await asyncio.sleep(0)  # let the disconnect watcher run
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _deep(send: Send, stream: bool) -> None:
    log(f"FAULT deep_json: JSON nested {DEEP} deep")
    nested = b"[" * DEEP + b"]" * DEEP
    await send(_start("text/event-stream" if stream else "application/json"))
    await send(
        {
            "type": "http.response.body",
            "body": b"data: " + nested + b"\n\n" if stream else nested,
            "more_body": False,
        }
    )


async def _endless(send: Send, left: asyncio.Event) -> None:
    log("FAULT endless_sse: a stream without end")
    await send(_start("text/event-stream"))
    event = (
        b'data: {"id": "endless", "object": "chat.completion.chunk", "choices": [{"index": 0, '
        b'"delta": {"content": "x"}, "finish_reason": null}]}\n\n'
    )
    batch = event * 100
    while not left.is_set():
        await send({"type": "http.response.body", "body": batch, "more_body": True})
        await asyncio.sleep(0)
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def _trickling(send: Send, left: asyncio.Event) -> Send:
    """The body a byte every TRICKLE_S, then a space as often without end (an empty /health body too):
    chunked, so the length is never known."""

    async def out(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"content-length"]
            await send({**message, "headers": headers})
            return
        if message["type"] != "http.response.body":
            await send(message)
            return
        body = message.get("body", b"")
        i = 0
        while i < len(body) or not message.get("more_body"):
            if left.is_set():
                raise _ClientLeft
            await send({"type": "http.response.body", "body": body[i : i + 1] or b" ", "more_body": True})
            i += 1
            await asyncio.sleep(TRICKLE_S)

    return out


def _scripting(send: Send, rewrite: Any) -> Send:
    """JSON bodies are held whole and rewritten (their length changes); SSE events one by one."""
    start: Message | None = None
    held: list[bytes] = []

    async def out(message: Message) -> None:
        nonlocal start
        if message["type"] == "http.response.start":
            start = message
            if _content_type(message) == "text/event-stream":
                await send(message)
            return
        if message["type"] != "http.response.body" or start is None:
            await send(message)
            return
        body = message.get("body", b"")
        if _content_type(start) == "text/event-stream":
            await send({**message, "body": _script_events(body, rewrite)})
            return
        held.append(body)
        if message.get("more_body"):
            return
        whole = b"".join(held)
        if _content_type(start) == "application/json":
            with contextlib.suppress(ValueError):
                whole = json.dumps(rewrite(json.loads(whole))).encode()
        headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
        await send({**start, "headers": [*headers, (b"content-length", str(len(whole)).encode())]})
        await send({"type": "http.response.body", "body": whole, "more_body": False})

    return out


def _content_type(start: Message) -> str:
    for key, value in start.get("headers", []):
        if key.lower() == b"content-type":
            return value.decode("latin-1").partition(";")[0].strip()
    return ""


def _script_events(body: bytes, rewrite: Any) -> bytes:
    out = []
    for event in body.split(b"\n\n"):
        if event.startswith(b"data: {"):
            with contextlib.suppress(ValueError):
                event = b"data: " + json.dumps(rewrite(json.loads(event[6:]))).encode()
        out.append(event)
    return b"\n\n".join(out)


def _scripted(value: Any, payload: str, key: str | None = None) -> Any:
    if isinstance(value, str):
        return value if key in _PROTOCOL_FIELDS else value + payload
    if isinstance(value, dict):
        return {k: _scripted(v, payload, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_scripted(v, payload, key) for v in value]
    return value


def _infinite(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: float("inf") if k in _LENGTH_FIELDS and isinstance(v, int) else _infinite(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_infinite(v) for v in value]
    return value
