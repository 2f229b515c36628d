"""cli/app.py builds one command per run through typer's own, undocumented builders; the typer
it runs on is pinned, bounded on both sides, to the releases where they are what app.py calls.
These fail when a typer that changed them is installed, before a person meets a TypeError."""

from __future__ import annotations

import inspect
import tomllib
from pathlib import Path

import typer
import typer.main
from packaging.requirements import Requirement
from packaging.version import Version

import deploytool.cli  # noqa: F401  registers the commands
from deploytool.cli.app import app

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _typer_requirement() -> Requirement:
    deps = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    return next(r for r in map(Requirement, deps) if r.name == "typer")


def test_the_private_builders_take_what_app_py_passes():
    """The names and keywords cli/app.py's LazyCommands and lazy_group call them with."""
    short, markup = app.pretty_exceptions_short, app.rich_markup_mode
    command = app.registered_commands[0]
    group = app.registered_groups[0]
    calls = {
        "get_command_from_info": ((command,), {"pretty_exceptions_short": short, "rich_markup_mode": markup}),
        "get_group_from_info": (
            (group,),
            {
                "pretty_exceptions_short": short,
                "rich_markup_mode": markup,
                "suggest_commands": app.suggest_commands,
            },
        ),
        "solve_typer_info_defaults": ((group,), {}),
        "get_command_name": (("a_name",), {}),
        "get_group": ((app,), {}),
    }
    for name, (args, kwargs) in calls.items():
        helper = getattr(typer.main, name, None)
        assert callable(helper), f"typer {typer.__version__} has no typer.main.{name}"
        inspect.signature(helper).bind(*args, **kwargs)  # TypeError: its parameters changed
    solved = typer.main.solve_typer_info_defaults(group)
    assert {"help", "short_help", "hidden", "deprecated"} <= set(vars(solved))  # what _group_summary reads


def test_the_pin_is_bounded_and_holds_the_installed_typer():
    spec = _typer_requirement().specifier
    uppers = [s for s in spec if s.operator == "<"]
    lowers = [s for s in spec if s.operator == ">="]
    assert uppers and lowers, (
        f"typer{spec}: the builders app.py calls may change in any release; bound the pin"
    )
    # get_group_from_info takes suggest_commands from typer 0.20 on
    assert Version(lowers[0].version) >= Version("0.20")
    assert Version(typer.__version__) in spec, (
        f"typer {typer.__version__} is outside the tested pin typer{spec}"
    )
