"""deploytool's command line: a thin shell. Each command parses, calls one library function
and prints; the commands live in one module per area and register on the one `app`."""

from __future__ import annotations

import sys

from ..errors import EXIT_USAGE, DeploytoolError
from .app import app, console_err

# Importing the command modules registers their commands on `app`.
from . import deploy_cmds  # noqa: E402,F401  gpus, profiles, build, render, up, status, rollback
from . import images_cmds  # noqa: E402,F401  patches check, profiles check, doctor
from . import bench_cmds  # noqa: E402,F401  bench, compare
from . import qualify_cmds  # noqa: E402,F401  qualify


def main(argv: list[str] | None = None) -> None:
    """Entry point: a DeploytoolError becomes its message and exit code, never a traceback."""
    try:
        app(args=argv, prog_name="deploytool")
    except DeploytoolError as exc:
        console_err.print(f"[bold red]error:[/] {exc.message}", highlight=False, markup=True)
        if exc.hint:
            console_err.print(f"  [dim]hint:[/] {exc.hint}", highlight=False)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        console_err.print("interrupted")
        sys.exit(130)
    except OSError as exc:
        console_err.print(f"[bold red]error:[/] {exc}", highlight=False)
        sys.exit(EXIT_USAGE)
