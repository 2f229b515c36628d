"""A container's log as lines, in time linear in its bytes and with each line held to a cap.

The log is the server's own output, so it is read as hostile: one line of 32 MiB, written in
many small pieces, must neither be joined again at every piece (the cost grows with the square
of the line) nor be held whole. A line longer than MAX_LINE_BYTES is cut there and ends with
CUT_MARK, at once, and the rest of it up to its newline is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

MAX_LINE_BYTES = 256 * 1024
CUT_MARK = f" [... line cut: longer than {MAX_LINE_BYTES // 1024} KiB, the rest not shown]"


def log_lines(chunks: Iterable[bytes], max_bytes: int = MAX_LINE_BYTES) -> Iterator[str]:
    """The lines of a log that arrives as `chunks` of bytes, split at newlines only (a carriage
    return or a form feed is text, shown by the terminal sanitiser), each decoded as UTF-8."""
    parts: list[bytes] = []
    size = 0
    cut = False  # the current line was cut: its bytes up to the next newline are dropped
    for chunk in chunks:
        start = 0
        while True:
            newline = chunk.find(b"\n", start)
            end = len(chunk) if newline < 0 else newline
            if not cut and end > start:
                room = max_bytes - size
                if end - start > room:
                    parts.append(chunk[start : start + room])
                    yield _text(parts) + CUT_MARK
                    parts, size, cut = [], 0, True
                else:
                    parts.append(chunk[start:end])
                    size += end - start
            if newline < 0:
                break
            if not cut:
                yield _text(parts)
            parts, size, cut = [], 0, False
            start = newline + 1
    if parts and not cut:
        yield _text(parts)


def _text(parts: list[bytes]) -> str:
    line = b"".join(parts).decode("utf-8", "replace")
    return line[:-1] if line.endswith("\r") else line  # a CRLF line ending is a line ending
