"""Several slots: rollout (one slot out of service at a time) and watch (the supervisor)."""

from pathlib import Path
from typing import Annotated, Literal

import typer

from ..errors import UsageError
from .app import (
    CpuOpt,
    DrainOpt,
    HooksOpt,
    JsonOpt,
    ProfilesDirOpt,
    TakeOverOpt,
    app,
    console_err,
    print_json,
)
from .console_reporter import ConsoleReporter
from .slot_options import slots_from_options

RolloutGpuOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--gpu", help="A slot's GPU UUID, once per slot; a multi-card slot is its UUIDs joined by commas."
    ),
]
RolloutCpuSlotOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--cpu-slot", help="A CPU slot of the reference runtime, cpu-NAME (repeatable; for tests and demos)."
    ),
]


@app.command("rollout")
def rollout_command(
    profile: Annotated[
        str | None, typer.Option("--profile", help="Profile name (`deploytool profiles list`).")
    ] = None,
    gpu: RolloutGpuOpt = None,
    all_gpus: Annotated[
        bool,
        typer.Option(
            "--all-gpus",
            help="Every slot this host's cards make for the profile, in the order `deploytool slots` lists them (one-card slots in card order, tensor-parallel groups closest-connected first); the first is the canary.",
        ),
    ] = False,
    cpu: CpuOpt = False,
    cpu_slot: RolloutCpuSlotOpt = None,
    max_unavailable: Annotated[
        int, typer.Option("--max-unavailable", min=1, help="Slots out of service at a time.")
    ] = 1,
    canary_qualify: Annotated[
        str,
        typer.Option(
            "--canary-qualify",
            help="full: the canary runs the profile's whole qualify set; quick: the rollout set.",
        ),
    ] = "full",
    undo_on_failure: Annotated[
        bool,
        typer.Option(
            "--undo-on-failure", help="On a failure, roll back the slots this rollout already upgraded."
        ),
    ] = False,
    resume: Annotated[
        bool,
        typer.Option("--resume", help="Continue the last interrupted or failed rollout, from the journal."),
    ] = False,
    undo: Annotated[
        bool, typer.Option("--undo", help="Roll back the slots the last rollout upgraded, from the journal.")
    ] = False,
    limit: Annotated[int | None, typer.Option("--limit", help="Cap data-driven suites at N items.")] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print every slot's plan and change nothing.")
    ] = False,
    json_output: JsonOpt = False,
    profiles_dir: ProfilesDirOpt = None,
    hooks_dir: HooksOpt = None,
    drain_timeout: DrainOpt = None,
    take_over: TakeOverOpt = False,
) -> None:
    """Upgrade several slots to a profile, at most --max-unavailable out of service at a time:
    build once, then each slot's whole `up` (the first, the canary, fully qualified); a failure
    restores that slot and stops. Resumable (--resume) and undoable (--undo) from the journal."""
    if resume or undo:
        if resume and undo:
            raise UsageError("give --resume or --undo, not both")
        if profile or gpu or all_gpus or cpu or cpu_slot:
            raise UsageError("--resume and --undo take the profile and slots from the journal; give neither")
        _from_the_journal(undo=undo, dry_run=dry_run, json_output=json_output, hooks_dir=hooks_dir)
        return
    from ..deploy import rollout as rollouts
    from ..deploy.rollout_plan import RolloutRequest

    if profile is None:
        raise UsageError("say which profile to roll out: --profile NAME")
    if all_gpus and gpu:
        raise UsageError("give either --all-gpus or --gpu UUID, not both")
    if not dry_run:  # before the engine is asked anything: no card of a described host is here
        from ..host.nvml import refuse_on_described_host

        refuse_on_described_host(
            [f"--gpu {g}" for g in gpu or []] + (["--all-gpus"] if all_gpus else []), "rollout"
        )
    request = RolloutRequest(
        profile_name=profile,
        slots=tuple(slots_from_options(cpu, cpu_slot, gpu)),
        all_gpus=all_gpus,
        max_unavailable=max_unavailable,
        canary_qualify=_canary_qualify(canary_qualify),
        undo_on_failure=undo_on_failure,
        qualify_limit=limit,
        profiles_dirs=tuple(profiles_dir) if profiles_dir else None,
        dry_run=dry_run,
        drain_timeout=drain_timeout,
        take_over=take_over,
    )
    if dry_run:
        plan = rollouts.dry_run(request)
        print_json({"dry_run": True, "plan": plan.to_json()}) if json_output else typer.echo(
            "\n".join(plan.lines())
        )
        return
    with ConsoleReporter() as reporter:
        result = rollouts.rollout(request, reporter=reporter, hooks_dir=hooks_dir)
    print_json(result) if json_output else typer.echo("\n".join(result.lines()))


def _canary_qualify(value: str) -> Literal["full", "quick"]:
    if value == "full":
        return "full"
    if value == "quick":
        return "quick"
    raise UsageError(f"--canary-qualify {value!r}: expected full or quick")


def _from_the_journal(*, undo: bool, dry_run: bool, json_output: bool, hooks_dir: Path | None) -> None:
    """--resume and --undo: the last rollout, from the journal (with --dry-run: what it holds)."""
    from ..deploy import rollout as rollouts
    from ..deploy.rollout_journal import last_rollout, undo_lines, undo_plan

    if dry_run and undo:
        planned = undo_plan()
        print_json({"dry_run": True, "undo": planned}) if json_output else typer.echo(
            "\n".join(undo_lines(planned))
        )
        return
    if dry_run:
        last = last_rollout()
        print_json(last) if json_output else typer.echo(
            f"rollout {last.id}: {last.options.profile_name} on "
            f"{', '.join(s.name for s in last.options.slots)}; upgraded: {', '.join(last.done) or 'none'}; "
            f"{last.finished or 'unfinished'}"
        )
        return
    with ConsoleReporter() as reporter:
        if undo:
            undone = rollouts.undo(reporter=reporter, hooks_dir=hooks_dir)
            print_json(undone) if json_output else typer.echo(
                "\n".join(
                    [f"rollout {undone['id']} undone"]
                    + [f"  slot {s.slot}: release {s.release} {s.state}" for s in undone["slots"]]
                    + [f"  {p}" for p in undone["problems"]]
                )
            )
            return
        done = rollouts.resume(reporter=reporter, hooks_dir=hooks_dir)
    print_json(done) if json_output else typer.echo("\n".join(done.lines()))


@app.command("watch")
def watch_command(
    cpu: CpuOpt = False,
    cpu_slot: RolloutCpuSlotOpt = None,
    gpu: RolloutGpuOpt = None,
    once: Annotated[bool, typer.Option("--once", help="Probe every slot once, act, and exit.")] = False,
    max_seconds: Annotated[
        float | None, typer.Option("--max-seconds", help="Stop after this many seconds.")
    ] = None,
    interval: Annotated[
        float | None,
        typer.Option("--interval", help="Seconds between rounds (default: the profiles' watch.interval)."),
    ] = None,
    render: Annotated[
        str | None,
        typer.Option("--render", help="Print what runs watch unattended, and exit: compose or systemd."),
    ] = None,
    image: Annotated[
        str | None, typer.Option("--image", help="With --render compose: the image holding deploytool.")
    ] = None,
    user: Annotated[
        str | None,
        typer.Option("--user", help="With --render systemd: the user to run as (in the docker group)."),
    ] = None,
    json_output: JsonOpt = False,
    hooks_dir: HooksOpt = None,
) -> None:
    """Supervise the serving releases: restart one whose health probe keeps failing (Docker
    restarts only what exits), with backoff and a cap per hour; roll a release that keeps
    failing right after its cut-over back to the previous one. Foreground until Ctrl-C."""
    if render is not None:
        from ..deploy.watch_install import watch_compose_text, watch_systemd_unit

        if render == "compose":
            if not image:
                raise UsageError(
                    "--render compose needs --image REF: an image with deploytool installed",
                    hint="docs/watch.md shows a Dockerfile for it",
                )
            typer.echo(
                watch_compose_text(image, hooks_dir=hooks_dir.resolve() if hooks_dir else None), nl=False
            )
        elif render == "systemd":
            typer.echo(
                watch_systemd_unit(hooks_dir=hooks_dir.resolve() if hooks_dir else None, user=user), nl=False
            )
        else:
            raise UsageError(f"--render {render!r}: expected compose or systemd")
        return
    from ..deploy.hooks import GatewayHooks
    from ..deploy.journal_text import line
    from ..deploy.watch import WatchOptions, watch

    names = [slot.name for slot in slots_from_options(cpu, cpu_slot, gpu)]
    with ConsoleReporter() as reporter:
        result = watch(
            WatchOptions(slots=names or None, once=once, max_seconds=max_seconds, interval=interval),
            reporter=reporter,
            hooks=GatewayHooks(hooks_dir, reporter=reporter),
        )
    if json_output:
        print_json(result)
    else:
        console_err.print(
            f"watch: {result.rounds} rounds in {result.seconds} s, {len(result.actions)} actions"
        )
        for action in result.actions:
            typer.echo(line(action))
