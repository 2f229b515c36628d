"""Text from outside, made safe for a terminal: what a server, a container's log, a profile or
the journal holds is shown, never obeyed.

A terminal acts on the control characters in what it is sent: ESC starts a sequence that moves
the cursor, erases lines, sets the window title or (OSC 52) writes the clipboard; U+009B is a
one-character CSI; a carriage return or backspaces write over what is already on the line; BEL
rings; bidirectional overrides reorder what is shown. `visible` replaces each such character
with its escape as Python writes it (`\\x1b`, `\\r`, `\\u202e`), so the bytes are still there to
read and nothing acts on them. Newline and tab stay where the text is many lines (a log);
`one_line` escapes the newline too, for a field that is one line of deploytool's own (a journal
entry: a newline in a field would print a second, forged entry).

`console` makes deploytool's rich consoles: every text they render passes `visible`, and text
that is not valid markup is printed as it is instead of ending the command with a MarkupError.
Text from outside is still handed to rich as text (`markup=False`, `rich.text.Text`), never
spliced into markup.

Standard library only at import: rich is imported when a console is made.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

_NAMED = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
# C0 controls and DEL; C1 controls (U+0080-U+009F: U+009B is CSI, U+009D OSC on terminals that
# read 8-bit controls); the bidirectional marks, embeddings, overrides and isolates; the line and
# paragraph separators some terminals and editors break lines at.
_CONTROL_POINTS = [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), 0x061C, 0x200E, 0x200F,
                   *range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029]


def _escape(point: int) -> str:
    if point in _NAMED:
        return _NAMED[point]
    return f"\\x{point:02x}" if point < 0x100 else f"\\u{point:04x}"


_ONE_LINE = {point: _escape(point) for point in _CONTROL_POINTS}
_LINES = {point: text for point, text in _ONE_LINE.items() if point not in (0x09, 0x0A)}
_UNSAFE_ONE_LINE = re.compile("[" + "".join(re.escape(chr(p)) for p in _CONTROL_POINTS) + "]")
_UNSAFE = re.compile("[" + "".join(re.escape(chr(p)) for p in _LINES) + "]")


def visible(text: str) -> str:
    """`text` with every control character but newline and tab shown as its escape."""
    if _UNSAFE.search(text) is None:  # nearly every text: one scan, no copy
        return text
    return text.translate(_LINES)


def one_line(text: str) -> str:
    """`text` as one line: every control character, newline and tab included, shown as its escape."""
    if _UNSAFE_ONE_LINE.search(text) is None:
        return text
    return text.translate(_ONE_LINE)


def is_visible(text: str) -> bool:
    """Whether `text` holds nothing a terminal would act on (newline and tab aside)."""
    return _UNSAFE.search(text) is None


def console(**kwargs: Any) -> Any:
    """A rich Console (the same arguments) whose rendered text passes `visible`."""
    return _console_class()(**kwargs)


@cache
def _console_class() -> type:
    from rich.console import Console
    from rich.errors import MarkupError
    from rich.segment import Segment

    class VisibleConsole(Console):
        """Every string passes `visible` before it is read as markup (so a table's columns are
        measured on what is shown); a string that is not valid markup prints as plain text; and
        every segment rendered, whatever made it (a Text built elsewhere, a progress bar's
        description), passes `visible` again, and loses any link (OSC 8: deploytool's own output
        has none, so one can only come from text that reached markup). Segments rich marks as its
        own control codes (a live display's cursor moves) are rich's, and pass as they are."""

        def render_str(self, text: str, **kwargs: Any) -> Any:
            text = visible(text)
            try:
                return super().render_str(text, **kwargs)
            except MarkupError:
                return super().render_str(text, **{**kwargs, "markup": False})

        def render(self, renderable: Any, options: Any = None) -> Any:
            for segment in super().render(renderable, options):
                if segment.control is not None:
                    yield segment
                    continue
                text, style = segment.text, segment.style
                if _UNSAFE.search(text) is not None:
                    text = text.translate(_LINES)
                if style is not None and style.link:  # deploytool prints no link: one came from outside
                    style = style.clear_meta_and_links()
                yield Segment(text, style) if (text, style) != (segment.text, segment.style) else segment

        # What the console writes is already visible, and holds rich's own colour codes: it goes
        # to the stream's `verbatim` side (secrets scrubbed, nothing escaped) where there is one.
        @property
        def file(self) -> Any:
            stream = Console.file.fget(self)  # type: ignore[attr-defined]
            return getattr(stream, "verbatim", stream)

        @file.setter
        def file(self, value: Any) -> None:
            Console.file.fset(self, value)  # type: ignore[attr-defined]

    return VisibleConsole
