"""`deploytool journal` reads as one line per event, time, action, slot, release and what
happened, never a dict; `--json` still prints the entries themselves."""

from __future__ import annotations

import json
import re

from conftest import run_cli

from deploytool.release.state import journal, read_journal

LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ  (?P<event>\S+) +(?P<slot>\S+) +(?P<release>\S+)  (?P<what>.+)$"
)


def write_an_up_and_a_rollback() -> None:
    """The entries one up and one rollback write, with the fields the executor gives them."""
    journal(
        "up.start",
        slot="cpu",
        release=2,
        profile="sim",
        image="deploytool/sim:abc",
        previous=1,
        skip_qualify=False,
        model="none",
    )
    journal(
        "step",
        slot="cpu",
        release=2,
        action="up",
        step="Stop",
        describe="stop release 1 (kept)",
        restore=False,
    )
    journal("release.healthy", slot="cpu", release=2, seconds=3.2)
    journal("qualify", slot="cpu", release=2, passed=True, summary="8 suites passed", report_dir="/tmp/q")
    journal("cutover", slot="cpu", release=2, previous=1, url="http://127.0.0.1:30000")
    journal("rollback", slot="cpu", release=1, stopped=2)
    journal(
        "hook",
        hook="pre-stop",
        slot="cpu",
        release=2,
        path="/hooks/pre-stop",
        exit_code=0,
        seconds=0.1,
        timed_out=False,
    )
    journal("something.new", slot="cpu", release=3, detail={"a": 1}, items=["x", "y"])


def test_one_readable_line_per_event():
    write_an_up_and_a_rollback()
    out = run_cli("journal", "--cpu", "--limit", "50")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == len(read_journal("cpu"))
    parsed = [LINE.match(x) for x in lines]
    assert all(parsed), lines
    assert not any("{" in x or "'" in x for x in lines), lines  # no Python reprs
    by_event = {m["event"]: m for m in parsed}
    assert by_event["cutover"]["what"] == (
        "serves at http://127.0.0.1:30000; release 1 stopped, kept as the rollback target"
    )
    assert (by_event["cutover"]["slot"], by_event["cutover"]["release"]) == ("cpu", "2")
    assert by_event["up.start"]["what"] == "up: profile sim, image deploytool/sim:abc, replacing release 1"
    assert by_event["qualify"]["what"] == "qualification passed: 8 suites passed (report /tmp/q)"
    assert by_event["rollback"]["what"] == "serves again; release 2 stopped"
    assert by_event["hook"]["what"] == "pre-stop hook /hooks/pre-stop exited 0 after 0.1 s"
    assert by_event["something.new"]["what"] == "detail a 1; items x, y"  # an event it does not know


def test_json_is_the_entries_themselves():
    write_an_up_and_a_rollback()
    out = run_cli("journal", "--cpu", "--json", "--limit", "50")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"entries": read_journal("cpu")}
    assert json.loads(out.stdout)["entries"][-1]["detail"] == {"a": 1}
