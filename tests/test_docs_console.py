"""The docs are executed: every console block of the README and docs/ runs as its page shows it
and prints what the page shows (after normalising times, ids, ports and paths), and every
command listing names only options its command has; a block that cannot run here says why in
its marker (tests/docs_blocks.py has the rules)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sybil import Sybil

from docs_blocks import ROOT, ConsoleParser, Runner, SkipBlock

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
