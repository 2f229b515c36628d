"""server/wire.py's rules and the stream walker's linear parse, on their own (the hostile server
tests run them end to end): JSON too deep is a ValueError, never a RecursionError; an SSE event
that arrives over many reads is kept as its pieces and joined once; an event past the cap fails."""

from __future__ import annotations

import json

import pytest

from deploytool.server import wire
from deploytool.server.chat_result import ChatResult, error_message
from deploytool.server.chat_stream import ChatStream


def _chunk(text: str) -> str:
    return json.dumps({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]})


def _walk(reads: list[bytes]) -> ChatResult:
    result = ChatResult(streamed=True, t_start=0.0)
    stream = ChatStream(result)
    for i, data in enumerate(reads):
        if stream.feed(data, float(i)):
            break
    stream.finish(body_ended=True)
    return result


def test_json_nested_past_the_limit_is_a_value_error_at_any_depth() -> None:
    assert wire.loads("[" * wire.MAX_JSON_DEPTH + "]" * wire.MAX_JSON_DEPTH) is not None
    for depth in (wire.MAX_JSON_DEPTH + 1, 5_000, 100_000):
        with pytest.raises(wire.WireError, match="nested deeper than 64 levels"):
            wire.loads("[" * depth + "]" * depth)
    deep: list = []
    node = deep
    for _ in range(100_000):  # built without recursion; walked without it too
        node.append([])
        node = node[0]
    assert wire.too_deep(deep) and not wire.too_deep({"a": [{"b": 1}]})
    assert error_message("[" * 100_000 + "]" * 100_000).startswith("[[[")  # the text, not a traceback


def test_the_keep_alive_race_rule() -> None:
    assert wire.resend_after_race(reused=True, answered=False)
    assert not wire.resend_after_race(reused=False, answered=False)  # a fresh connection failed: real
    assert not wire.resend_after_race(reused=True, answered=True)  # the server had started answering


@pytest.mark.parametrize("sep", ["\n", "\r\n", "\r"])
def test_events_split_at_every_byte_read_as_a_whole(sep: str) -> None:
    # (the last event ends in LF: a lone CR at the very end may still have its LF to come)
    body = "".join(f"data: {_chunk(w)}{sep}{sep}" for w in ("Hello", ", ", "world")) + "data: [DONE]\n\n"
    whole = _walk([body.encode()])
    split = _walk([bytes([b]) for b in body.encode()])
    assert whole.error is None and whole.saw_done and whole.content == "Hello, world"
    assert (split.content, split.saw_done, split.error, split.chunks) == (whole.content, True, None, 3)


def test_a_long_event_is_kept_as_its_pieces_and_joined_once() -> None:
    text = "x" * 300_000
    body = f"data: {_chunk(text)}\n\n".encode()
    result = ChatResult(streamed=True, t_start=0.0)
    stream = ChatStream(result)
    pieces = [body[i : i + 1024] for i in range(0, len(body), 1024)]
    for piece in pieces[:-1]:
        assert stream.feed(piece, 0.0) is False
    # every read kept as it came (no buffer re-joined per read), the event joined when it ended
    assert len(stream.pending) == len(pieces) - 1
    stream.feed(pieces[-1], 0.0)
    stream.finish(body_ended=True)
    assert stream.pending == [] and result.content == text


def test_an_event_past_the_cap_fails_before_it_is_held_whole() -> None:
    stream = ChatStream(ChatResult(streamed=True, t_start=0.0))
    piece = b"data: " + b"a" * (2**20)
    stream.feed(piece, 0.0)
    with pytest.raises(wire.WireError, match="an SSE event larger than 4 MiB"):
        for _ in range(8):
            stream.feed(b"a" * 2**20, 0.0)
    assert stream.pending_size <= wire.MAX_EVENT_BYTES + 2**20


def test_an_event_nested_too_deep_is_a_wire_error() -> None:
    stream = ChatStream(ChatResult(streamed=True, t_start=0.0))
    with pytest.raises(wire.WireError, match="nested too deep"):
        stream.feed(b"data: " + b"[" * 100_000 + b"]" * 100_000 + b"\n\n", 0.0)
