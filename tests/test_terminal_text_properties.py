"""Properties of the terminal sanitiser (deploytool.terminal_text) over hostile text: nothing a
terminal acts on survives it, nothing else is changed, what it removes is still there to read,
and deploytool's consoles print any text (markup or not) without obeying it or failing. Example
counts are modest: the suite runs on two cores."""

from __future__ import annotations

import io
import re

from hypothesis import HealthCheck, given, settings, strategies as st

from deploytool.terminal_text import console, is_visible, one_line, visible

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PIECES = ["\x1b]52;c;aGk=\x07", "\x1b]0;title\x1b\\", "\x1b[2K", "\x1b[1A", "\x1b[31m", "\x9b2J", "\x9d8;;x\x9c",
          "\r", "\x08", "\x07", "\x00", "\x7f", "\n", "\t", "\u202e", "\u2066", "\u2028", "[/x]", "[link=x]",
          "[bold]", "\\x1b", "é", "中", "🙂", " ", "plain"]
hostile = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=6)), max_size=10).map("".join)

# What a terminal may act on: C0 controls, DEL, C1 controls, the bidi and line separators.
_ACTED_ON = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


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
@given(st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cf", "Zl", "Zp")), max_size=40))
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
