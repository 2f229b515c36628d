"""deploytool's command line: a thin shell. Each command parses, calls one library function
and prints; the commands live in one module per area and register on the one `app`.

The command modules do without `from __future__ import annotations`: typer reads every
command's signature at each start, even for `--help`, and annotations kept as strings would be
compiled and evaluated again every time (tests/test_cli_starts_light.py)."""

from __future__ import annotations

import signal
import sys
import threading

import typer

from ..errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_TERMINATED, DeploytoolError, FieldError, Terminated

# Importing the command modules registers their commands on `app`.
# In the order a user meets them: profiles, build, deploy, check; and the host.
from . import (
    bench_cmds,  # noqa: F401  bench, compare
    build_cmds,  # noqa: F401  build, patches check
    deploy_cmds,  # noqa: F401  render, up, status, rollback, journal, cache
    host_cmds,  # noqa: F401  gpus, slots, doctor
    k8s_cmds,  # noqa: F401  k8s apply, status, rollback
    memory_cmds,  # noqa: F401  plan-memory
    monitor_cmds,  # noqa: F401  top, monitor
    profiles_cmds,  # noqa: F401  profiles list, show, check
    qualify_cmds,  # noqa: F401  qualify
    rollout_cmds,  # noqa: F401  rollout, watch
    slot_cmds,  # noqa: F401  stop, start, down, logs
    tune_cmds,  # noqa: F401  tune
)
from .app import ScrubbedStream, app, console_err, json_error
from .flags import FLAG_OF_FIELD, flag_message


def main(argv: list[str] | None = None) -> None:
    """Entry point: a DeploytoolError becomes its message and exit code, never a traceback. With
    --json, every error is also one JSON object on stdout (docs/json.md), so that a script that
    reads stdout learns why, including a bad option or a bad value that never reached a command."""
    args = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in args
    streams = sys.stdout, sys.stderr
    if not isinstance(sys.stdout, ScrubbedStream):
        sys.stdout, sys.stderr = ScrubbedStream(sys.stdout), ScrubbedStream(sys.stderr)
    _terminate_like_ctrl_c()
    try:
        _main(args, as_json)
    except SystemExit as exit_:
        # typer and click turn the interrupt into exit 130 on their own paths: after a SIGTERM
        # the status and the words say SIGTERM
        if _TERMINATED and exit_.code == EXIT_INTERRUPTED:
            console_err.print("terminated (SIGTERM)", markup=False)
            sys.exit(EXIT_TERMINATED)
        raise
    finally:
        sys.stdout, sys.stderr = streams


_TERMINATED = False


def _terminate_like_ctrl_c() -> None:
    """SIGTERM raises Terminated (a KeyboardInterrupt) in the main thread. Python's default
    for SIGTERM is to die at once, skipping every `finally`: a `kill`, a batch scheduler's time
    limit or a container stop would leave a tune candidate's server holding the GPU. A handler
    someone else installed (an embedding program) is left alone."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def _raise(signum: int, frame: object) -> None:
        global _TERMINATED
        _TERMINATED = True
        # once: a second SIGTERM must not cut short the clean-up the first one started
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated()

    signal.signal(signal.SIGTERM, _raise)


def _main(args: list[str], as_json: bool) -> None:
    try:
        if not as_json:
            app(args=args, prog_name="deploytool")
            return
        code = app(args=args, prog_name="deploytool", standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except typer.TyperException as exc:  # only without standalone mode: a bad option or value (click's)
        code = getattr(exc, "exit_code", 2)
        json_error(
            exc.format_message() if hasattr(exc, "format_message") else str(exc), None, code, "UsageError"
        )
        exc.show() if hasattr(exc, "show") else console_err.print(str(exc), markup=False)
        sys.exit(code)
    except (typer.Abort, KeyboardInterrupt):  # click's Ctrl-C inside a prompt, or anywhere else
        if _TERMINATED:
            if as_json:
                json_error("terminated (SIGTERM)", None, EXIT_TERMINATED, "Terminated")
            sys.exit(EXIT_INTERRUPTED)  # main() says SIGTERM and exits 143
        if as_json:
            json_error("interrupted (Ctrl-C)", None, EXIT_INTERRUPTED, "Interrupted")
        console_err.print("interrupted (Ctrl-C)", markup=False)
        sys.exit(EXIT_INTERRUPTED)
    except FieldError as exc:
        # a bad value of one flag: the same kind as click's own refusals, as before requests named
        # their fields, and the flag beside it for a script that wants to point at it
        message, flag = flag_message(exc), FLAG_OF_FIELD.get(exc.field)
        if as_json:
            json_error(message, exc.hint, exc.exit_code, "UsageError", exc.details, flag=flag)
        _error(message, exc.hint, exc.exit_code)
    except DeploytoolError as exc:
        if as_json:
            json_error(
                exc.message, exc.hint, exc.exit_code, type(exc).__name__, getattr(exc, "details", None)
            )
        _error(exc.message, exc.hint, exc.exit_code)
    except OSError as exc:
        if as_json:
            json_error(str(exc), None, EXIT_FAILED, "OSError")
        _error(str(exc), None, EXIT_FAILED)


def _error(message: str, hint: str | None, code: int) -> None:
    # Messages carry container logs and paths: print them as text, never as rich markup.
    console_err.print("[bold red]error:[/] ", end="")
    # and never as emoji codes either: `--card h200:two` is a value, not ":two:"
    console_err.print(message, markup=False, highlight=False, emoji=False)
    if hint:
        console_err.print("  [dim]hint:[/] ", end="")
        console_err.print(hint, markup=False, highlight=False, emoji=False)
    sys.exit(code)
