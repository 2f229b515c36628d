"""The docs' console blocks as Sybil examples: each runs the way the page shows it, and its
output is compared with the page's after normalising what differs between runs.

A fenced block is a **console block** when a line starts with `$ ` (the prompt): each prompt's
command runs (`deploytool ...`, with any `VAR=value` before it, from the repository root) and
the lines after it, up to the next prompt, are the output the page promises. A block of bare
`deploytool ...` lines (a synopsis, a list of commands) is a **command listing**: every
`--option` it names must be an option of that command, as the CLI defines it now.

A marker in an HTML comment on the line before the block says how to treat it:

  <!-- docs-test: skip REASON -->   not run (a GPU, a card's driver, a long measurement); the
                                      reason is required and shown as the skip's reason
  <!-- docs-test: excerpt -->       the output shown is part of what is printed: its lines must
                                      appear in that order, others may come between them

In the expected output a line `...` stands for any lines, and `...` inside a line for any text.

The commands of one block share a state folder of their own (a later one sees what an earlier
one kept), with no Docker engine (DOCKER_HOST points nowhere) and an empty hub cache, so a page
shows what a new machine prints; a `--port N` the page names is replaced by a free port. Before comparing,
both sides lose what differs between runs: ports, long hex ids, times and durations, the state
folder's path, runs of spaces and of table rules.
"""

from __future__ import annotations

import os
import re
import shlex
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import cli_forkserver
from sybil import Document, Region
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"<!--\s*docs-test:\s*(?P<kind>skip|excerpt)\b\s*(?P<reason>.*?)\s*-->\s*\n\s*$")


@dataclass
class Block:
    kind: str  # "console" or "listing"
    text: str
    line: int  # where the block starts in its page
    marker: str | None = None  # skip / excerpt
    reason: str = ""
    commands: list[tuple[str, list[str]]] = field(default_factory=list)  # (command, expected lines)


class SkipBlock(Exception):
    """A block whose marker says it cannot run here, with why."""


def parse_block(text: str) -> tuple[str, list[tuple[str, list[str]]]] | None:
    lines = text.splitlines()
    if any(line.startswith("$ ") for line in lines):
        commands: list[tuple[str, list[str]]] = []
        for line in lines:
            if line.startswith("$ "):
                commands.append((line[2:].strip(), []))
            elif commands:
                commands[-1][1].append(line)
        return "console", commands
    meaningful = [line for line in lines if line.strip() and not line.lstrip().startswith("#")]
    if (
        meaningful
        and all(line.startswith(("deploytool ", " ", "\t")) for line in meaningful)
        and meaningful[0].startswith("deploytool ")
    ):
        return "listing", [(line, []) for line in meaningful]
    return None


class ConsoleParser:
    """Sybil parser: the console blocks and command listings of a page, with their markers."""

    def __init__(self, runner: Runner) -> None:
        self.lexer = RawFencedCodeBlockLexer(info_pattern=re.compile(r"(?P<info>[^\n]*)\n"))
        self.runner = runner

    def __call__(self, document: Document):
        for region in self.lexer(document):
            if region.lexemes.get("info", "").strip() not in ("", "console", "shell", "text"):
                continue
            parsed = parse_block(str(region.lexemes["source"]))
            if parsed is None:
                continue
            before = document.text[max(0, region.start - 400) : region.start]
            found = MARKER.search(before)
            block = Block(
                kind=parsed[0],
                text=str(region.lexemes["source"]),
                line=document.text.count("\n", 0, region.start) + 1,
                commands=parsed[1],
                marker=found["kind"] if found else None,
                reason=found["reason"] if found else "",
            )
            yield Region(region.start, region.end, parsed=block, evaluator=self.runner.evaluate)


# -- normalising ------------------------------------------------------------------------------
_RULES = re.compile("[\u2500-\u257f]+")  # box drawing: table rules and borders


def normalise(line: str, home: str | None = None) -> str:
    if home:
        line = line.replace(home, "~/.local/state/deploytool")
    line = re.sub(r"(127\.0\.0\.1|localhost|\[::1\]|0\.0\.0\.0):\d+", r"\1:PORT", line)
    line = re.sub(r"\b[0-9a-f]{12,64}\b", "HEX", line)
    line = re.sub(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?Z?", "TIME", line)
    line = re.sub(r"\b\d{8}T\d{6,9}Z\b", "TIME", line)  # a report folder's UTC time
    line = re.sub(r"\b\d{8}-\d{6}-[0-9a-f]{4}\b", "ID", line)  # a rollout's id
    line = re.sub(r"\b\d+(\.\d+)? (s|ms)\b", r"N \2", line)
    line = _RULES.sub(" ", line)
    return re.sub(r"\s+", " ", line).strip()


def _pattern(expected: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in expected.split("...")) + r"\Z")


def matches(expected: list[str], actual: list[str], *, excerpt: bool) -> str | None:
    """None when `actual` is what `expected` shows; else where they part, in words."""
    want = [line for line in expected if line]
    have = [line for line in actual if line]
    if excerpt:
        position = 0
        for line in want:
            if line == "...":
                continue
            pattern = _pattern(line)
            while position < len(have) and not pattern.match(have[position]):
                position += 1
            if position == len(have):
                return f"shown line not printed (in this order): {line!r}"
            position += 1
        return None

    def walk(i: int, j: int) -> bool:
        if i == len(want):
            return j == len(have)
        if want[i] == "...":
            return any(walk(i + 1, k) for k in range(j, len(have) + 1))
        return j < len(have) and bool(_pattern(want[i]).match(have[j])) and walk(i + 1, j + 1)

    if walk(0, 0):
        return None
    for _k, line in enumerate(want):  # the first shown line with no counterpart, for the message
        if line != "..." and not any(_pattern(line).match(x) for x in have):
            return f"shown line not printed: {line!r}"
    return f"the lines differ in order or number: shown {len(want)}, printed {len(have)}"


# -- running ----------------------------------------------------------------------------------
class Runner:
    """Runs a block's commands as a new user would, each in a fresh state folder."""

    def evaluate(self, example) -> str | None:
        block: Block = example.parsed
        if block.marker == "skip":
            if not block.reason:
                return "a docs-test skip marker needs a reason"
            raise SkipBlock(block.reason)
        if block.kind == "listing":
            return check_listing(block)
        problems = []
        with tempfile.TemporaryDirectory(
            prefix="docs-test-"
        ) as home:  # one per block: its commands follow on
            for command, expected in block.commands:
                actual = run(command, home)
                got = [normalise(x, home) for x in actual]
                want = [normalise(x) for x in expected]
                problem = matches(want, got, excerpt=block.marker == "excerpt")
                if problem:
                    problems.append(
                        f"$ {command}\n  {problem}\n  printed:\n" + "\n".join("    " + x for x in actual[:60])
                    )
        return "\n".join(problems) or None


def run(command: str, home: str) -> list[str]:
    words = shlex.split(command, comments=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEPLOYTOOL_")}
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    if not words or words[0] != "deploytool":
        raise AssertionError(f"a console block runs deploytool only: {command!r}")
    # a port the page names is taken here by whoever has it: the command gets a free one
    words = [str(free_port()) if i and words[i - 1] == "--port" else w for i, w in enumerate(words)]
    env.update(
        DEPLOYTOOL_HOME=home,
        DEPLOYTOOL_HF_HOME=str(Path(home) / "hf"),
        COLUMNS="120",
        NO_COLOR="1",
        TERM="dumb",
        DOCKER_HOST="unix:///nonexistent/docker.sock",
    )
    proc = cli_forkserver.run(words[1:], env, ROOT, 120)  # as `python -m deploytool`, its imports made once
    return (proc.stdout + proc.stderr).splitlines()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_listing(block: Block) -> str | None:
    """Every --option a command listing names is one its command has."""
    import typer.main

    import deploytool.cli  # noqa: F401 - registers every command on the app
    from deploytool.cli.app import app

    group = typer.main.get_command(app)
    problems = []
    text = "\n".join(c for c, _ in block.commands)
    for chunk in re.split(r"\n(?=deploytool )", text):
        words = [w for w in re.split(r"[\s\[\]()|]+", chunk.split("#", 1)[0]) if w]
        command, names = group, []
        for word in words[1:]:
            sub = getattr(command, "commands", {}).get(word) if hasattr(command, "commands") else None
            if sub is None:
                break
            command, names = sub, [*names, word]
        if command is group:
            problems.append(f"`{chunk.splitlines()[0]}`: no such command")
            continue
        known = {o for p in command.params for o in getattr(p, "opts", []) + getattr(p, "secondary_opts", [])}
        for option in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", chunk.split("#", 1)[0]):
            if option not in known and option != "--help":
                problems.append(f"`deploytool {' '.join(names)}` has no option {option}")
    return "\n".join(problems) or None
