"""The docs are executed: every console block of the README and docs/ runs as its page shows it
and prints what the page shows (after normalising times, ids, ports and paths), and every
command listing names only options its command has; a block that cannot run here says why in
its marker (tests/docs_blocks.py has the rules)."""

from __future__ import annotations

from pathlib import Path

import pytest
from docs_blocks import ROOT, ConsoleParser, Runner, SkipBlock
from sybil import Sybil

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_SYBIL = Sybil(parsers=[ConsoleParser(Runner())], path=str(ROOT))


def _examples() -> list:
    out = []
    for page in PAGES:
        for example in _SYBIL.parse(Path(page)):
            block = example.parsed
            out.append(pytest.param(example, id=f"{page.relative_to(ROOT)}:{block.line}"))
    return out


EXAMPLES = _examples()


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_page_shows_what_the_command_prints(example) -> None:
    try:
        example.evaluate()
    except SkipBlock as why:
        pytest.skip(str(why))


def test_the_pages_the_walk_read_have_console_blocks_that_run() -> None:
    """The pages a new user walks show commands with their output, and most of them run here."""
    run = {}
    for param in EXAMPLES:
        block = param.values[0].parsed
        page = param.id.split(":")[0]
        if block.kind == "console" and block.marker != "skip":
            run[page] = run.get(page, 0) + 1
    for page in ("docs/gpus.md", "docs/memory.md", "docs/deploy.md", "docs/qualify.md", "docs/bench.md"):
        assert run.get(page, 0) >= 1, f"{page} shows no console block that runs"


def test_the_comparison_catches_a_wrong_page_and_forgives_only_what_differs_between_runs() -> None:
    from docs_blocks import matches, normalise, parse_block

    printed = [
        normalise(x, "/tmp/h")
        for x in [
            "url: http://127.0.0.1:40123 (port: --port)",
            "  2. record release 1 in /tmp/h/slots/cpu/releases/1",
            "┃ a ┃  b ┃",
            "took 12.5 s",
            "image deploytool/sim:sim-194d42ba6842-base-by-tag",
        ]
    ]
    page = [
        normalise(x)
        for x in [
            "url: http://127.0.0.1:30000 (port: --port)",
            "2. record release 1 in ~/.local/state/deploytool/slots/cpu/releases/1",
            "│ a │ b │",
            "took 3 s",
            "image deploytool/sim:sim-0123456789ab-base-by-tag",
        ]
    ]
    assert matches(page, printed, excerpt=False) is None
    assert matches([*page[:1], "..."], printed, excerpt=False) is None
    assert "not printed" in matches(["url: http://127.0.0.1:30000 (port: kept)"], printed, excerpt=True)
    assert matches(page[1:2] + page[:1], printed, excerpt=True) is not None  # order counts
    assert parse_block("$ deploytool gpus\nout\n")[0] == "console"
    assert parse_block("deploytool up --gpu UUID  # comment\n")[0] == "listing"
    assert parse_block("images/  folders\n") is None
