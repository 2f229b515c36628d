"""The rules every call to a serving runtime keeps, written once: the server deploytool talks to
is the one it is about to judge, so whatever it sends is hostile until read within bounds.

- **A total deadline.** Each call has one budget from connect to its last byte (the callers wrap
  the whole call in `asyncio.timeout`): httpx's timeouts are per read, so a server that sends a
  byte a second would otherwise never time out.
- **Size caps.** A whole body (`MAX_BODY_BYTES`), one SSE event (`MAX_EVENT_BYTES`) and a whole
  stream (`MAX_STREAM_BYTES`) are read only up to their cap: past it the call fails with
  `WireError`, and nothing larger is ever held in memory.
- **JSON a report can hold.** `loads` refuses a document nested deeper than `MAX_JSON_DEPTH`
  (Python's own parser raises RecursionError at about 1,000 levels; every later step that walks
  the value, redaction and reports, would too).
- **Finite numbers.** Python's parser reads `NaN`, `Infinity` and `-Infinity`, which JSON does
  not have; a server's `max_model_len: Infinity` would end a later `int()` in OverflowError.
  `loads` (and the stream walker's decoder, `strict_decoder`) refuse them as malformed JSON.
- **Characters, not surrogates.** JSON's `\\udce2` escape names a UTF-16 half; Python's parser
  keeps one that has no partner as a lone surrogate, which is no character: writing it as UTF-8
  raises UnicodeEncodeError (a report), and through `surrogateescape` it becomes a raw byte
  (U+DC9B: a C1 CSI). `loads`, the stream walker (`lone_surrogate`) and error bodies refuse
  such a string as malformed JSON, as they refuse a number JSON does not have, rather than
  replacing it with U+FFFD: a server that sends one is broken, and a report says so.
- **A chunk-size line** of a chunked body is at most `MAX_CHUNK_LINE_BYTES` (bench's own HTTP/1.1
  path reads it): a line that never ends is refused there, not scanned again at every read.
- **The keep-alive race** (`resend_after_race`), for both transports (client.py, fast_stream.py).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

# How long an idle connection is kept for reuse. SGLang serves through uvicorn with
# timeout_keep_alive = SGLANG_TIMEOUT_KEEP_ALIVE, 5 s by default (sglang/srt/environ.py,
# entrypoints/http_server.py), and httpx's own default expiry is also 5 s: a request sent on a
# connection the server is closing at that very moment ends "Server disconnected without sending
# a response". Expiring well before the server does keeps the client off that edge.
KEEPALIVE_EXPIRY_S = 2.0

# A non-streamed body: SGLang's largest (a /metrics with every histogram, a long non-streamed
# answer) is a few MiB at most.
MAX_BODY_BYTES = 32 * 2**20
# One SSE event: SGLang writes one per token (about 250 bytes); a tool call's arguments or a
# final usage block stay far below this.
MAX_EVENT_BYTES = 4 * 2**20
# A whole stream: a 128k-token answer at SGLang's ~250 bytes a chunk is about 32 MiB.
MAX_STREAM_BYTES = 128 * 2**20
# Nesting of a JSON document from a server: OpenAI's and SGLang's bodies go 5 or 6 levels deep.
MAX_JSON_DEPTH = 64
# The status line and headers of a response (bench's own HTTP/1.1 path parses them itself).
MAX_HEAD_BYTES = 64 * 1024
# One chunk-size line of a chunked body: the size in hex and any chunk extensions (SGLang's
# uvicorn writes none; 8 hex digits cover 4 GiB).
MAX_CHUNK_LINE_BYTES = 4096


class WireError(ValueError):
    """A response deploytool refuses to read: over a size cap, JSON nested too deep, a number
    JSON does not have, or a string that is not characters (a lone surrogate)."""


LONE_SURROGATE = (
    "JSON with a lone surrogate (a \\ud800-\\udfff escape without its pair), which is no character "
    "(expected UTF-8 text)"
)
# Where a JSON text may hold a surrogate: an escape of one (a pair is one character once parsed,
# so only the walk of the parsed value can tell a lone one) or, for bytes, one written as UTF-8
# (json.loads decodes bytes with surrogatepass). Nearly no body has either: one scan, no walk.
_MAY_HOLD = re.compile(rb"\\u[dD][89abcdefABCDEF]|\xed[\xa0-\xbf]")
_MAY_HOLD_TEXT = re.compile("\\\\u[dD][89abcdefABCDEF]|[\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _non_finite(name: str) -> Any:
    raise WireError(f"JSON with the number {name}, which JSON does not have (expected a finite number)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: a JSON number that no float holds
        raise WireError(
            f"JSON with the number {text[:40]}, larger than any finite number (expected a finite number)"
        )
    return value


def strict_decoder() -> json.JSONDecoder:
    """A decoder that refuses NaN, Infinity, -Infinity and numbers past a float's range (WireError)."""
    return json.JSONDecoder(parse_constant=_non_finite, parse_float=_finite_float)


_DECODER = strict_decoder()


def loads(data: bytes | str) -> Any:
    """json.loads for what a server sent: ValueError (JSONDecodeError, or WireError) for anything
    that is not a JSON document of at most MAX_JSON_DEPTH levels with finite numbers; never
    RecursionError."""
    # one decoder for every call: json.loads with hooks would build a decoder and scanner each time
    text = data.decode(json.detect_encoding(data), "surrogatepass") if isinstance(data, bytes) else data
    try:
        value = _DECODER.decode(text)
    except RecursionError:
        raise WireError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    if too_deep(value):
        raise WireError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    may_hold = _MAY_HOLD.search(data) if isinstance(data, bytes) else _MAY_HOLD_TEXT.search(data)
    if may_hold is not None and lone_surrogate(value):
        raise WireError(LONE_SURROGATE)
    return value


def may_hold_surrogate(text: str) -> bool:
    """Whether JSON text may hold a lone surrogate (an escape of one, or one as it is): a scan
    for the stream walker to call before it walks the parsed event with `lone_surrogate`."""
    return _MAY_HOLD_TEXT.search(text) is not None


def lone_surrogate(value: Any) -> bool:
    """Whether a parsed JSON value holds a string (a key or a value) with a lone surrogate."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item) is not None:
                return True
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether a parsed JSON value nests deeper than `limit` (walked with a stack, not recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def over_cap(what: str, cap: int) -> WireError:
    return WireError(
        f"{what} larger than {cap // 2**20 if cap >= 2**20 else cap} "
        f"{'MiB' if cap >= 2**20 else 'bytes'}: not read further"
    )


def resend_after_race(*, reused: bool, answered: bool) -> bool:
    """Whether a request that failed with a connection error is sent once more, on a fresh
    connection: only when it went out on a kept-alive connection (`reused`) and no byte of the
    answer came back (`answered` false). The server closed that idle connection as the request
    went out (its keep-alive timeout), so it never processed the request. A failure on a fresh
    connection, after the server started answering, or by our own deadline stays a failure."""
    return reused and not answered
