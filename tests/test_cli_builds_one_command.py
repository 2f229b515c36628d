"""A run of `deploytool` builds only the command it names (cli/app.py's lazy_group), and what a
person sees is what typer's own eager build shows: every group's `--help` listing, every
command's help, a misspelt command's suggestion, the exit codes."""

from __future__ import annotations

import contextlib
import io
from types import SimpleNamespace

import typer.main

import deploytool.cli  # noqa: F401  registers the commands
from deploytool.cli.app import LazyCommands, app, lazy_group


def _invoke(group, args: list[str]) -> SimpleNamespace:
    """Run a click group as `deploytool ARGS` runs it (standalone: it exits), in this process."""
    out = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            group.main(args=args, prog_name="deploytool")
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0
    return SimpleNamespace(exit_code=code, output=out.getvalue())


def _paths(group, prefix=()) -> list[tuple[str, ...]]:
    """Every group and command path under an eagerly built group."""
    out = [prefix]
    for name, cmd in group.commands.items():
        out += _paths(cmd, (*prefix, name)) if hasattr(cmd, "commands") else [(*prefix, name)]
    return out


def test_every_help_page_is_the_one_typer_builds_eagerly():
    eager = typer.main.get_command(app)
    paths = _paths(eager)
    assert len(paths) > 40  # the root, six groups and their commands
    for path in paths:
        lazy = _invoke(lazy_group(app), [*path, "--help"])
        full = _invoke(eager, [*path, "--help"])
        assert (lazy.exit_code, lazy.output) == (full.exit_code, full.output), path
        assert lazy.exit_code == 0 and "Usage: deploytool" in lazy.output


def test_the_root_listing_names_every_command_and_group_in_registration_order():
    listing = _invoke(lazy_group(app), ["--help"]).output.split("Commands:")[1]
    names = [line.split()[0] for line in listing.splitlines() if line.startswith("  ") and line.split()]
    assert names == list(typer.main.get_command(app).commands)


def test_a_run_builds_only_the_command_it_names():
    group = lazy_group(app)
    assert isinstance(group.commands, LazyCommands)
    assert _invoke(group, ["--help"]).exit_code == 0
    assert group.commands._built == {}  # the listing read summaries, built nothing
    assert _invoke(group, ["plan-memory", "--help"]).exit_code == 0
    assert list(group.commands._built) == ["plan-memory"]
    assert _invoke(group, ["cache", "--help"]).exit_code == 0
    assert sorted(group.commands._built) == ["cache", "plan-memory"]


def test_mistakes_read_the_same():
    eager = typer.main.get_command(app)
    for args in (["stauts"], ["up", "--no-such-flag"], ["cache"], [], ["profiles", "nope"]):
        lazy, full = _invoke(lazy_group(app), args), _invoke(eager, args)
        assert (lazy.exit_code, lazy.output) == (full.exit_code, full.output), args
    assert "Did you mean 'status'" in _invoke(lazy_group(app), ["stauts"]).output


def test_an_unknown_name_is_not_built():
    commands = lazy_group(app).commands
    assert commands.get("no-such-command") is None
    assert "no-such-command" not in commands and "status" in commands
