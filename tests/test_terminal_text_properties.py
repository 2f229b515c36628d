"""Properties of the terminal sanitiser (deploytool.terminal_text) over hostile text: nothing a
terminal acts on survives it, nothing else is changed, what it removes is still there to read,
and deploytool's consoles print any text (markup or not) without obeying it or failing. Example
counts are modest: the suite runs on two cores."""

from __future__ import annotations

import io
import re
import sys
import unicodedata

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deploytool.terminal_text import console, is_visible, one_line, visible

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PIECES = [
    "\x1b]52;c;aGk=\x07",
    "\x1b]0;title\x1b\\",
    "\x1b[2K",
    "\x1b[1A",
    "\x1b[31m",
    "\x9b2J",
    "\x9d8;;x\x9c",
    "\r",
    "\x08",
    "\x07",
    "\x00",
    "\x7f",
    "\n",
    "\t",
    "\u202e",
    "\u2066",
    "\u2028",
    "[/x]",
    "[link=x]",
    "[bold]",
    "\\x1b",
    "é",
    "中",
    "🙂",
    " ",
    "plain",
    # what shows nothing or is no character: zero-width space, word joiner, BOM, the
    # deprecated format controls, interlinear annotation, Mongolian vowel separator, tag
    # characters (an invisible "hi"), a joiner inside an emoji, lone surrogates, private use
    "\u200b",
    "\u2060",
    "\ufeff",
    "\u206a",
    "\u206f",
    "\ufff9",
    "\u180e",
    "\U000e0068\U000e0069",
    "👨\u200d👩",
    "\udce2\udc80\udcae",
    "\udc9b",
    "\ue000",
    "\U000f0000",
]
hostile = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=6)), max_size=10).map("".join)

# What a terminal may act on or shows as nothing: C0 controls, DEL, C1 controls, the line
# separators, format characters (Cf: the bidi ones among them), surrogates, private use.
_ACTED_ON = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029"
    + "".join(
        re.escape(chr(p))
        for p in range(sys.maxunicode + 1)
        if unicodedata.category(chr(p)) in ("Cf", "Cs", "Co")
    )
    + "]"
)


@SETTINGS
@given(hostile)
def test_visible_leaves_nothing_a_terminal_acts_on_and_keeps_lines(text: str) -> None:
    shown = visible(text)
    assert _ACTED_ON.search(shown) is None and is_visible(shown)
    assert shown.count("\n") == text.count("\n") and shown.count("\t") >= text.count("\t")
    assert visible(shown) == shown  # once is enough: printing it again changes nothing


@SETTINGS
@given(hostile)
def test_one_line_is_one_line(text: str) -> None:
    shown = one_line(text)
    assert "\n" not in shown and "\t" not in shown and _ACTED_ON.search(shown) is None
    assert one_line(shown) == shown


@SETTINGS
@given(
    st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cf", "Cs", "Co", "Zl", "Zp")), max_size=40)
)
def test_text_without_controls_is_unchanged(text: str) -> None:
    assert visible(text) == text and one_line(text) == text


@SETTINGS
@given(hostile)
def test_what_is_escaped_reads_back_as_the_original(text: str) -> None:
    # Python's own escapes: a reader of the output can tell exactly what the server sent
    escaped = one_line(text.replace("\\", "\\\\"))
    assert escaped.encode("ascii", "backslashreplace").decode("unicode_escape") == text


@SETTINGS
@given(hostile, st.booleans())
def test_a_console_prints_any_text_without_obeying_it_or_failing(text: str, as_markup: bool) -> None:
    out = io.StringIO()
    terminal = console(file=out, force_terminal=True, color_system="truecolor", width=80)
    # as_markup: a string that reached markup anyway (the fallback prints it as text, no MarkupError)
    terminal.print(text, markup=as_markup, highlight=False)
    printed = out.getvalue()
    codes = re.sub(r"\x1b\[[0-9;]*m", "", printed)  # the colours deploytool's own markup asked for
    assert _ACTED_ON.search(codes.replace("\n", "")) is None, repr(printed)
    assert "\x1b]8;" not in printed  # never a live link


def test_every_character_that_shows_nothing_or_is_none_is_escaped() -> None:
    """Every format character (Cf), surrogate (Cs) and private-use character (Co) of this
    Python's Unicode database: the list terminal_text writes out is checked against it here."""
    missed = [
        f"U+{p:04X}"
        for p in range(sys.maxunicode + 1)
        if unicodedata.category(chr(p)) in ("Cf", "Cs", "Co")
        and (visible(chr(p)) == chr(p) or is_visible(chr(p)))
    ]
    assert missed == []
    assert visible("a\u200bb") == "a\\u200bb" and visible("\U000e0041") == "\\U000e0041"
