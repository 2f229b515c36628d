"""The light commands load only what they need: `deploytool --help` and `deploytool status`
(with nothing running) import no pydantic (deploytool's models, or typer's coercion of an
absent --help), no pandas, no Docker SDK and no suite. An import check, not a clock: how fast
that makes a start is a figure for benchmarks/cli_start.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

# Modules whose import a light command must not pay for: the libraries, and deploytool's own
# modules that build pydantic models at import (profiles, the bench method, the qualify suites'
# settings) or pull the engine's SDK and the suites in. pydantic itself: typer coerces a value
# that is not already a bool through a pydantic TypeAdapter, and an absent --help was None
# (cli/app.py's _help_flag_false). rich's Console: what these commands print goes through
# typer.echo, and the consoles are made at their first use (cli/app.py's LazyConsole).
HEAVY = (
    "pandas",
    "docker",
    "matplotlib",
    "kubernetes",
    "jinja2",
    "pydantic",
    "rich.console",
    "deploytool.profiles",
    "deploytool.bench",
    "deploytool.qualify",
    "deploytool.qualify.suites",
    "deploytool.host.engine",
    "deploytool.deploy.executor",
    "deploytool.image",
    "deploytool.k8s.render",
)


def loaded_after(statement: str, env: dict[str, str] | None = None) -> list[str]:
    code = f"import sys\n{statement}\nimport json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, **(env or {})},
    )
    modules = set(json.loads(out.stdout.splitlines()[-1]))
    return [m for m in HEAVY if m in modules]


def run_command(*args: str) -> str:
    """The CLI's own entry point in this process, then exit-proof: the statement for loaded_after."""
    return (
        "from deploytool.cli import main\n"
        f"try:\n    main({list(args)!r})\nexcept SystemExit as exc:\n"
        "    assert exc.code in (0, None), exc.code\n"
    )


def test_state_helpers_do_not_load_pandas_or_the_engine():
    assert loaded_after("import deploytool.release.state, deploytool.files") == []


def test_the_cli_loads_its_libraries_only_when_a_command_runs():
    assert loaded_after("import deploytool.cli") == []
    assert loaded_after(run_command("--help")) == []
    assert loaded_after(run_command("status", "--help")) == []


def test_status_with_nothing_running_loads_no_model_no_sdk_no_suite(docker_engine):
    """Against the real engine: this test session's instance has nothing running."""
    assert loaded_after(run_command("status", "--json")) == []
    assert loaded_after(run_command("status")) == []


def test_the_check_sees_a_heavy_import():
    """The check itself: a command that does load the profiles' models is caught."""
    assert "deploytool.profiles" in loaded_after(run_command("profiles", "list", "--json"))


def _callbacks(group) -> list:
    """Every command function registered on a typer app and its sub-apps."""
    out = [c.callback for c in group.registered_commands]
    for sub in group.registered_groups:
        out += _callbacks(sub.typer_instance)
    return out


def test_command_signatures_are_objects_not_strings():
    """typer reads every command's signature at each start, `--help` included: annotations kept
    as strings (`from __future__ import annotations`) are compiled and evaluated again each time,
    a measurable part of the start (benchmarks/cli_start.py). The command modules keep them as
    objects."""
    import deploytool.cli  # noqa: F401  registers the commands
    from deploytool.cli.app import app

    callbacks = _callbacks(app)
    assert len(callbacks) > 30
    as_strings = [
        f"{f.__module__}.{f.__name__}: {name}"
        for f in callbacks
        for name, annotation in f.__annotations__.items()
        if isinstance(annotation, str)
    ]
    assert not as_strings, as_strings
