"""deploytool's command line: a thin shell. Each command parses, calls one library function
and prints; the commands live in one module per area and register on the one `app`."""

from __future__ import annotations

import sys

from ..errors import EXIT_FAILED, EXIT_INTERRUPTED, DeploytoolError
from .app import app, console_err

# Importing the command modules registers their commands on `app`.
# In the order a user meets them: profiles, build, deploy, check; and the host.
from . import profiles_cmds  # noqa: E402,F401  profiles list, show, check
from . import build_cmds  # noqa: E402,F401  build, patches check
from . import deploy_cmds  # noqa: E402,F401  render, up, status, rollback, journal, cache
from . import qualify_cmds  # noqa: E402,F401  qualify
from . import bench_cmds  # noqa: E402,F401  bench, compare
from . import memory_cmds  # noqa: E402,F401  plan-memory
from . import rollout_cmds  # noqa: E402,F401  rollout, watch
from . import host_cmds  # noqa: E402,F401  gpus, doctor
from . import k8s_cmds  # noqa: E402,F401  k8s apply, status, rollback


def main(argv: list[str] | None = None) -> None:
    """Entry point: a DeploytoolError becomes its message and exit code, never a traceback."""
    try:
        app(args=argv, prog_name="deploytool")
    except DeploytoolError as exc:
        _error(exc.message, exc.hint, exc.exit_code)
    except KeyboardInterrupt:
        console_err.print("interrupted (Ctrl-C)", markup=False)
        sys.exit(EXIT_INTERRUPTED)
    except OSError as exc:
        _error(str(exc), None, EXIT_FAILED)


def _error(message: str, hint: str | None, code: int) -> None:
    # Messages carry container logs and paths: print them as text, never as rich markup.
    console_err.print("[bold red]error:[/] ", end="")
    console_err.print(message, markup=False, highlight=False)
    if hint:
        console_err.print("  [dim]hint:[/] ", end="")
        console_err.print(hint, markup=False, highlight=False)
    sys.exit(code)
