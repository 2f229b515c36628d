"""The one walker of a streamed chat completion: response body bytes in, a ChatResult out.

Both ways deploytool reads a stream feed it: EndpointClient (httpx, for qualify and every
https endpoint) and bench's own HTTP/1.1 path (server/fast_stream.py, for bench's CPU per token).
So the SSE rules, the [DONE] and error events, the delta bookkeeping (answer, reasoning,
tool-call fragments per index) and the timestamps are written once.

It is the hot path of a benchmark: one `feed` per network read, one JSON scan and one `take`
per event, text fragments collected in lists and joined once in `finish`. SSE is parsed from
the bytes (events end at a blank line; CRLF and CR are normalised; comments and fields other
than data are skipped). The parse is linear: an event that arrives over many reads is kept as
its pieces, and each read is searched for the blank line on its own (and at the seam), so a
long event costs its length once, not once per read; it may grow to wire.MAX_EVENT_BYTES.
"""

from __future__ import annotations

import codecs
from typing import Any

from .chat_result import ChatResult, ToolCall, body_message
from .wire import (
    LONE_SURROGATE,
    MAX_EVENT_BYTES,
    WireError,
    lone_surrogate,
    may_hold_surrogate,
    over_cap,
    strict_decoder,
)

# Both refuse NaN and Infinity (WireError), as wire.loads does; `feed` refuses a lone surrogate as it does.
_DECODER = strict_decoder()
_loads = _DECODER.decode
# The C scanner under json.loads: one call per event instead of loads -> decode -> raw_decode
# (that wrapper costs as much as the parsing for a small chunk). Failures fall back to loads.
_scan = _DECODER.scan_once  # type: ignore[attr-defined]  # JSONDecoder.__init__ sets it; typeshed leaves it out
_utf8 = codecs.getincrementaldecoder("utf-8")
# The chunk objects KeptChatStream holds at most (each a few hundred bytes as a dict): far more
# than a tool-calling answer's, far less than a server streaming without end could send.
MAX_KEPT_CHUNKS = 20_000


class ChatStream:
    """One streamed response. `feed` each read of the body, then `finish` once, however the
    stream ended; `take` applies one chunk object (for callers that hold chunks already)."""

    __slots__ = (
        "arguments",
        "calls",
        "content",
        "decode",
        "max_event",
        "model",
        "n",
        "n_answer",
        "n_reasoning",
        "pending",
        "pending_size",
        "reasoning",
        "result",
        "t_answer",
        "t_token",
        "times",
    )

    def __init__(self, result: ChatResult) -> None:
        self.result = result
        self.decode = _utf8("replace").decode  # a character split across two reads is joined
        self.pending: list[str] = []  # the pieces of an event whose end has not arrived yet
        self.pending_size = 0
        self.max_event = MAX_EVENT_BYTES
        self.calls: dict[int, ToolCall] = {}
        self.arguments: dict[int, list[str]] = {}
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.times = result.chunk_times
        self.n = self.n_reasoning = self.n_answer = 0  # chunks; deltas with reasoning; with an answer
        self.t_token: float | None = None
        self.t_answer: float | None = None
        self.model: str | None = None

    def feed(self, data: bytes, now: float) -> bool:
        """One read of the body; its events all arrived at `now` (so client parsing time never
        counts as server time). True when the stream is over: [DONE], or an error event (the
        result's error says which). Raises ValueError on an event that is not JSON (WireError
        for one over the event cap or nested too deep)."""
        text = self.decode(data)
        if self.pending:
            joined = self._joined(text)
            if joined is None:
                return False
            text = joined
        if "\r" in text:
            text = _lf(text)
        if "\n\n" not in text:
            self._keep(text)
            return False
        events = text.split("\n\n")
        rest = events.pop()
        if rest:
            self._keep(rest)
        try:
            for event in events:
                if event[:6] == "data: " and "\n" not in event:  # the usual one-line event
                    if event == "data: [DONE]":
                        self.result.saw_done = True
                        return True
                    try:
                        chunk, end = _scan(event, 6)
                        if end != len(event):
                            raise StopIteration
                    except StopIteration:  # not one JSON value: [DONE] with blanks, or loads says why
                        data_text = event[6:]
                        if data_text.strip() == "[DONE]":
                            self.result.saw_done = True
                            return True
                        chunk = _loads(data_text)
                else:
                    event_data = _event_data(event)
                    if event_data is None:
                        continue
                    if event_data.strip() == "[DONE]":
                        self.result.saw_done = True
                        return True
                    chunk = _loads(event_data)
                # an escape is rare in an event (SGLang writes UTF-8): the scan and walk, rarer still
                if "\\u" in event and may_hold_surrogate(event) and lone_surrogate(chunk):
                    raise WireError(LONE_SURROGATE)
                if self.take(chunk, now):
                    return True
            return False
        except RecursionError:
            raise WireError("an SSE event's JSON is nested too deep") from None

    def _joined(self, text: str) -> str | None:
        """This read after the pieces of an unfinished event: the whole text once the event ended
        (in this read, or at the seam), else None (the read is kept as one more piece)."""
        pending = self.pending
        if pending[-1][-1] == "\r":  # a CR kept back: its LF may open this read
            pending[-1] = pending[-1][:-1]
            text = "\r" + text
            if not pending[-1]:
                pending.pop()
                if not pending:
                    self.pending_size = 0
                    return text
        if "\r" in text:
            text = _lf(text)
        if "\n\n" not in text and not (text[:1] == "\n" and pending[-1][-1] == "\n"):
            self._keep(text)
            return None
        text = "".join(pending) + text
        pending.clear()
        self.pending_size = 0
        return text

    def _keep(self, text: str) -> None:
        if not text:
            return  # pending holds no empty piece
        self.pending.append(text)
        self.pending_size += len(text)
        if self.pending_size > self.max_event:
            raise over_cap("an SSE event", self.max_event)

    def take(self, chunk: dict[str, Any], now: float) -> bool:
        """One chunk object; True when it is an error event (the stream is over)."""
        self.n += 1
        result = self.result
        if chunk.get("object") == "error" or ("error" in chunk and "choices" not in chunk):
            result.error = f"error event in stream: {body_message(chunk)}"
            return True
        usage = chunk.get("usage")
        if usage:
            result.usage = usage
        self.model = chunk.get("model") or self.model
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta")
            if delta:
                token = False
                text = delta.get("reasoning_content")
                if text:
                    self.reasoning.append(text)
                    self.n_reasoning += 1
                    token = True
                answer = False
                text = delta.get("content")
                if text:
                    self.content.append(text)
                    answer = True
                pieces = delta.get("tool_calls")
                if pieces:
                    self._tool_calls(pieces)
                    answer = True
                if answer:
                    self.n_answer += 1
                    token = True
                    if self.t_answer is None:
                        self.t_answer = now
                if token:
                    self.times.append(now)
                    if self.t_token is None:
                        self.t_token = now
            finish = choice.get("finish_reason")
            if finish:
                result.finish_reason = finish
        return False

    def _tool_calls(self, pieces: list[dict[str, Any]]) -> None:
        """Tool-call fragments, assembled per index; argument fragments joined in `finish`."""
        calls, arguments = self.calls, self.arguments
        for piece in pieces:
            index = piece.get("index", 0)
            call = calls.get(index)
            if call is None:
                call = calls[index] = ToolCall(index=index)
                arguments[index] = []
            if piece.get("id") and piece["id"] != call.id:
                call.ids_seen += 1
                call.id = piece["id"]
            function = piece.get("function") or {}
            if function.get("name"):
                call.name = function["name"]
            if function.get("arguments"):
                arguments[index].append(function["arguments"])

    def finish(self, error: str | None = None, *, body_ended: bool = False) -> None:
        """Write what arrived into the result, also when the request failed part-way. `error`:
        why it ended early (a timeout, a dropped connection), never cleared once set.
        `body_ended`: the HTTP body ended; without [DONE] that is an error of its own. Tool calls
        are reported only when the stream ended ([DONE] or the end of the body): half a call's
        arguments are not a call."""
        r = self.result
        if error is not None:
            r.error = error
        r.content = "".join(self.content)
        r.reasoning_content = "".join(self.reasoning)
        r.t_first_token, r.t_first_answer = self.t_token, self.t_answer
        r.model = self.model or r.model
        r.chunks, r.reasoning_chunks, r.answer_chunks = self.n, self.n_reasoning, self.n_answer
        if r.saw_done or body_ended:
            for index, call in self.calls.items():
                call.arguments = "".join(self.arguments[index])
            r.tool_calls = [self.calls[i] for i in sorted(self.calls)]
        if body_ended and not r.saw_done and r.error is None:
            r.error = f"stream ended without [DONE] after {self.n} chunks"


class KeptChatStream(ChatStream):
    """The same walker, also keeping every chunk object (EndpointClient(keep_chunks=True)): a
    subclass, so that the usual stream pays nothing for the option."""

    __slots__ = ("kept",)

    def __init__(self, result: ChatResult, kept: list[Any]) -> None:
        super().__init__(result)
        self.kept = kept

    def take(self, chunk: dict[str, Any], now: float) -> bool:
        if len(self.kept) < MAX_KEPT_CHUNKS:  # a stream without end keeps no more than this
            self.kept.append(chunk)
        return super().take(chunk, now)


def _lf(buf: str) -> str:
    """CRLF and lone CR line ends as LF. A trailing CR is kept as is: its LF may be in the next read."""
    if buf[-1] == "\r":
        return buf[:-1].replace("\r\n", "\n").replace("\r", "\n") + "\r"
    return buf.replace("\r\n", "\n").replace("\r", "\n")


def _event_data(event: str) -> str | None:
    """The data of one SSE event (its data lines joined by LF), or None when it has none
    (comments such as keep-alives, or only event:/id:/retry: fields)."""
    data = []
    for line in event.split("\n"):
        if line[:4] == "data":
            name, _, value = line.partition(":")
            if name == "data":
                data.append(value[1:] if value[:1] == " " else value)
    return "\n".join(data) if data else None
