"""Text from outside, made safe for a terminal: what a server, a container's log, a profile or
the journal holds is shown, never obeyed.

A terminal acts on the control characters in what it is sent: ESC starts a sequence that moves
the cursor, erases lines, sets the window title or (OSC 52) writes the clipboard; U+009B is a
one-character CSI; a carriage return or backspaces write over what is already on the line; BEL
rings; bidirectional overrides reorder what is shown. Format characters (Unicode's category Cf:
zero-width spaces and joiners, U+FEFF, the invisible operators, the tag characters U+E0000 up)
show nothing, so a name that holds them reads as another; private-use characters show whatever a
font puts there; a lone surrogate (U+D800-U+DFFF, which JSON's `\\udce2` escapes can name) is no
character at all, and written through `surrogateescape` becomes a raw byte (U+DC9B: a C1 CSI).
`visible` replaces each such character with its escape as Python writes it (`\\x1b`, `\\r`,
`\\u202e`, `\\U000e0041`), so the bytes are still there to read and nothing acts on them. (A
zero-width joiner inside an emoji sequence is escaped too: the emoji then shows as its parts,
which is what was sent.) Newline and tab stay where the text is many lines (a log);
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
# read 8-bit controls); the line and paragraph separators some terminals and editors break lines at.
_CONTROL_POINTS = [*range(0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029]
# Ranges, both ends included, of what shows nothing or is no character. Format characters
# (category Cf as of Unicode 15, the bidirectional marks, embeddings, overrides and isolates among
# them; whole blocks where a block is all format characters, so a later Unicode's additions there
# are covered too); the surrogates; the private-use planes. Written out rather than read from
# unicodedata at import, which would walk all 1.1 million code points at every start-up;
# tests/test_terminal_text_properties.py checks this list against unicodedata.
_INVISIBLE_RANGES = [
    (0x00AD, 0x00AD),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE007F),
    (0xD800, 0xDFFF),  # surrogates
    (0xE000, 0xF8FF),
    (0xF0000, 0xFFFFD),
    (0x100000, 0x10FFFD),  # private use
]


def _escape(point: int) -> str:
    if point in _NAMED:
        return _NAMED[point]
    return f"\\x{point:02x}" if point < 0x100 else f"\\u{point:04x}" if point < 0x10000 else f"\\U{point:08x}"


def _class(points: list[int], ranges: list[tuple[int, int]]) -> re.Pattern[str]:
    return re.compile(
        "["
        + "".join(re.escape(chr(p)) for p in points)
        + "".join(f"{re.escape(chr(lo))}-{re.escape(chr(hi))}" for lo, hi in ranges)
        + "]"
    )


_UNSAFE_ONE_LINE = _class(_CONTROL_POINTS, _INVISIBLE_RANGES)
_UNSAFE = _class([p for p in _CONTROL_POINTS if p not in (0x09, 0x0A)], _INVISIBLE_RANGES)
# For ASCII text (isascii is a flag, not a scan) only the C0 controls and DEL can be there: a
# class of a few code points is searched several times faster than the one with every range.
_UNSAFE_ASCII_ONE_LINE = _class([p for p in _CONTROL_POINTS if p < 0x80], [])
_UNSAFE_ASCII = _class([p for p in _CONTROL_POINTS if p < 0x80 and p not in (0x09, 0x0A)], [])


def _escaped(match: re.Match[str]) -> str:
    return _escape(ord(match.group()))


def visible(text: str) -> str:
    """`text` with every control character but newline and tab, and every character that shows
    nothing or is none (format, surrogate, private use), shown as its escape."""
    unsafe = _UNSAFE_ASCII if text.isascii() else _UNSAFE
    if unsafe.search(text) is None:  # nearly every text: one scan, no copy
        return text
    return unsafe.sub(_escaped, text)


def one_line(text: str) -> str:
    """`text` as one line: every control character, newline and tab included, shown as its escape."""
    unsafe = _UNSAFE_ASCII_ONE_LINE if text.isascii() else _UNSAFE_ONE_LINE
    if unsafe.search(text) is None:
        return text
    return unsafe.sub(_escaped, text)


def is_visible(text: str) -> bool:
    """Whether `text` holds nothing a terminal would act on (newline and tab aside)."""
    return (_UNSAFE_ASCII if text.isascii() else _UNSAFE).search(text) is None


def console(**kwargs: Any) -> Any:
    """A rich Console (the same arguments) whose rendered text passes `visible`."""
    return _console_class()(**kwargs)


@cache
def _console_class() -> type:
    from rich.console import Console
    from rich.errors import MarkupError
    from rich.segment import Segment

    rich_file = vars(Console)["file"]  # rich's own `file` property, which VisibleConsole's wraps

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
                text = visible(text)
                if style is not None and style.link:  # deploytool prints no link: one came from outside
                    style = style.clear_meta_and_links()
                yield Segment(text, style) if (text, style) != (segment.text, segment.style) else segment

        # What the console writes is already visible, and holds rich's own colour codes: it goes
        # to the stream's `verbatim` side (secrets scrubbed, nothing escaped) where there is one.
        @property
        def file(self) -> Any:
            stream = rich_file.__get__(self)
            return getattr(stream, "verbatim", stream)

        @file.setter
        def file(self, value: Any) -> None:
            rich_file.__set__(self, value)

    return VisibleConsole
