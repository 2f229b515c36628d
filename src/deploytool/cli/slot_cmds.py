"""A slot out of service and back: stop, start, down, logs."""

import json
import sys
from typing import Annotated

import typer

from ..terminal_text import visible
from .app import CpuOpt, CpuSlotOpt, DrainOpt, GpuOpt, HooksOpt, JsonOpt, TakeOverOpt, app, print_json
from .deploy_cmds import DryRunOpt, _plan_or_apply
from .slot_options import slot_from_options


@app.command("stop")
def stop_command(
    gpu: GpuOpt = None,
    cpu: CpuOpt = False,
    cpu_slot: CpuSlotOpt = None,
    drain_timeout: DrainOpt = None,
    dry_run: DryRunOpt = False,
    json_output: JsonOpt = False,
    hooks_dir: HooksOpt = None,
    take_over: TakeOverOpt = False,
) -> None:
    """Take a slot out of service: the pre-stop hook, then wait until the server reports no running and
    no queued request (at most --drain-timeout), then stop the serving release. Every release is
    kept: `deploytool start` puts it back, `rollback` still has its target."""
    from ..deploy import slot_commands as slots
    from ..deploy.hooks import GatewayHooks

    slot = slot_from_options(gpu, cpu, cpu_slot)
    _plan_or_apply(
        dry_run,
        json_output,
        lambda: slots.plan_for_stop(slot, drain_timeout=drain_timeout, take_over=take_over),
        lambda reporter: slots.stop(
            slot,
            reporter=reporter,
            drain_timeout=drain_timeout,
            hooks=GatewayHooks(hooks_dir, reporter=reporter),
            take_over=take_over,
        ),
        lambda r: r.line(),
    )


@app.command("start")
def start_command(
    gpu: GpuOpt = None,
    cpu: CpuOpt = False,
    cpu_slot: CpuSlotOpt = None,
    release: Annotated[
        int | None,
        typer.Option(
            "--release",
            help="Start this kept release in place of the slot's current one (the output says so); without it only the current release is started.",
        ),
    ] = None,
    dry_run: DryRunOpt = False,
    json_output: JsonOpt = False,
    hooks_dir: HooksOpt = None,
    take_over: TakeOverOpt = False,
) -> None:
    """Start the slot's current (stopped) release again and verify it healthy. When the current
    release is gone, nothing is started in its place unasked: `up`, `rollback` or `--release N`."""
    from ..deploy import slot_commands as slots
    from ..deploy.hooks import GatewayHooks

    slot = slot_from_options(gpu, cpu, cpu_slot)
    _plan_or_apply(
        dry_run,
        json_output,
        lambda: slots.plan_for_start(slot, release=release, take_over=take_over),
        lambda reporter: slots.start(
            slot,
            reporter=reporter,
            release=release,
            take_over=take_over,
            hooks=GatewayHooks(hooks_dir, reporter=reporter),
        ),
        lambda r: r.line(),
    )


@app.command("down")
def down_command(
    gpu: GpuOpt = None,
    cpu: CpuOpt = False,
    cpu_slot: CpuSlotOpt = None,
    volumes: Annotated[
        bool,
        typer.Option(
            "--volumes",
            help="Also remove the slot's JIT cache volume and its state folder (pointers, rendered files, reports).",
        ),
    ] = False,
    drain_timeout: DrainOpt = None,
    dry_run: DryRunOpt = False,
    json_output: JsonOpt = False,
    hooks_dir: HooksOpt = None,
    take_over: TakeOverOpt = False,
) -> None:
    """Remove a slot: say what goes, drain and stop what serves, remove every release (container,
    compose project, network); the JIT cache volume and the slot's state only with --volumes."""
    from ..deploy import slot_commands as slots
    from ..deploy.hooks import GatewayHooks

    request = slots.DownRequest(
        slot_from_options(gpu, cpu, cpu_slot),
        volumes=volumes,
        drain_timeout=drain_timeout,
        take_over=take_over,
    )
    _plan_or_apply(
        dry_run,
        json_output,
        lambda: slots.plan_for_down(request),
        lambda reporter: slots.down(
            request, reporter=reporter, hooks=GatewayHooks(hooks_dir, reporter=reporter)
        ),
        lambda r: r.line(),
    )


@app.command("logs")
def logs_command(
    gpu: GpuOpt = None,
    cpu: CpuOpt = False,
    cpu_slot: CpuSlotOpt = None,
    release: Annotated[
        int | None,
        typer.Option(
            "--release",
            help="A kept release's log (default: the serving release's, else the slot's current one).",
        ),
    ] = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            "-f",
            help="Keep printing until Ctrl-C, across a restart of the release; without --release, across a new serving release of the slot (a new up, a rollback), saying so in one line.",
        ),
    ] = False,
    tail: Annotated[int | None, typer.Option("--tail", help="Only the last N lines.")] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="Only lines since a duration ago (30s, 10m, 2h) or an ISO 8601 time."),
    ] = None,
    raw: Annotated[
        bool,
        typer.Option(
            "--raw",
            help="Print the lines as the server wrote them, escape sequences and control characters included (by default they are shown as escapes, such as \\x1b, so the terminal never acts on them). Secrets are removed either way.",
        ),
    ] = False,
    json_output: JsonOpt = False,
) -> None:
    """A release's server log (what the server wrote to stdout and stderr)."""
    from ..deploy import slot_commands as slots

    slot = slot_from_options(gpu, cpu, cpu_slot)
    request = slots.LogsRequest(
        slot, release=release, tail=tail, since=slots.parse_since(since), follow=follow
    )
    lines = slots.logs(request)
    try:
        if json_output:  # the lines as one object; with --follow, one object per line
            if follow:
                for line in lines:  # JSON Lines: one object per line as it comes
                    if isinstance(line, slots.SlotNotice):
                        typer.echo(
                            json.dumps(
                                {
                                    "slot": slot.name,
                                    "serving": line.release,
                                    "was": line.was,
                                    "note": str(line),
                                }
                            )
                        )
                    else:
                        typer.echo(json.dumps({"line": line}))
            else:
                print_json({"slot": slot.name, "lines": list(lines)})
            return
        # stdout shows every control character as its escape; --raw writes past that, to the
        # stream that only scrubs secrets
        out = getattr(sys.stdout, "verbatim", sys.stdout) if raw else sys.stdout
        for line in lines:
            out.write((line if raw else visible(line)) + "\n")
            out.flush()
    except KeyboardInterrupt:  # the way a --follow ends
        return
