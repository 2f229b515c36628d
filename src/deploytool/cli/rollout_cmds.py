"""Several slots: rollout (one slot out of service at a time) and watch (the supervisor)."""

from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import UsageError
from ..host.slots import Slot, cpu_slot_named, slot_from_options
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
from .deploy_cmds import ConsoleReporter

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


def rollout_slots(
    gpus: list[str] | None,
    all_gpus: bool,
    cpu: bool,
    cpu_slots: list[str] | None,
    *,
    profile_name: str | None = None,
    profiles_dirs: list[Path] | None = None,
    engine: Any = None,
) -> tuple[list[Slot], list[str]]:
    """The slots in the order given (the first is the canary), and notes about them. --all-gpus:
    the slots this host's cards make for the profile, in the order `deploytool slots` lists them
    (one-card slots in card order, tensor-parallel groups closest-connected first); that needs
    NVML, not the engine."""
    slots: list[Slot] = []
    if cpu:
        slots.append(Slot())
    slots += [cpu_slot_named(name) for name in cpu_slots or []]
    slots += [slot_from_options(value.split(","), False) for value in gpus or []]
    notes: list[str] = []
    if all_gpus:
        if gpus:
            raise UsageError("give either --all-gpus or --gpu UUID, not both")
        if profile_name is None:
            raise UsageError(
                "--all-gpus groups this host's cards into the profile's slots: say which profile with "
                "--profile NAME"
            )
        from ..host.card_slots import plan_slots
        from ..host.gpus import require_inventory
        from ..profiles import ProfileStore

        plan = plan_slots(
            ProfileStore(profiles_dirs).get(profile_name),
            require_inventory(
                hint="--all-gpus reads this host's cards: give the slots with --gpu UUID, or roll out CPU slots "
                "with --cpu / --cpu-slot NAME"
            ),
        )
        if not plan.slots:
            raise UsageError(
                f"--all-gpus: this host's cards make no slot for profile {profile_name}",
                hint="; ".join(line.strip() for line in plan.lines()[1:]) or None,
            )
        # The cards the profile is made for; a slot that fits only with less memory is named,
        # not taken: give its --gpu to include it.
        taken = [s for s in plan.slots if s.verdict == "runnable"]
        if not taken:
            raise UsageError(
                f"--all-gpus: none of this host's slots for {profile_name} is runnable as the profile is",
                hint="; ".join(f"{s.name}: {s.verdict}: {'; '.join(s.reasons)}" for s in plan.slots)
                + f"; give --gpu {plan.slots[0].uuids[0]} to take one anyway",
            )
        slots += [Slot(gpus=tuple(sorted(s.uuids))) for s in taken]
        notes += [
            f"slot {s.name} ({' + '.join(s.cards)}) is {s.verdict}, not taken by --all-gpus "
            f"({'; '.join(s.reasons)}); give --gpu {','.join(s.uuids)} to include it"
            for s in plan.slots
            if s.verdict != "runnable"
        ]
        notes += [f"{c['card']} is not used: {c['why']}" for c in plan.unused]
        planned = {s.name for s in slots}
        serving = sorted(
            {r.slot for r in (engine.releases() if engine is not None else []) if r.gpus} - planned
        )
        notes += [
            f"slot {name} has a release but is not one of the slots this host's cards make for "
            f"{profile_name}: left alone"
            for name in serving
        ]
    return slots, notes


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
        int, typer.Option("--max-unavailable", help="Slots out of service at a time.")
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
    from ..deploy import rollout as rollouts
    from ..deploy.no_engine import engine_for_dry_run
    from ..deploy.rollout_plan import RolloutOptions
    from ..host.engine import Engine
    from ..host.nvml import refuse_on_described_host

    if resume and undo:
        raise UsageError("give --resume or --undo, not both")
    if resume or undo:
        if profile or gpu or all_gpus or cpu or cpu_slot:
            raise UsageError("--resume and --undo take the profile and slots from the journal; give neither")
        if dry_run and undo:
            planned = rollouts.undo_plan()
            print_json({"dry_run": True, "undo": planned}) if json_output else typer.echo(
                "\n".join(rollouts.undo_lines(planned))
            )
            return
        if dry_run:
            last = rollouts.last_rollout()
            print_json(last) if json_output else typer.echo(
                f"rollout {last.id}: {last.options.profile_name} on "
                f"{', '.join(s.name for s in last.options.slots)}; upgraded: {', '.join(last.done) or 'none'}; "
                f"{last.finished or 'unfinished'}"
            )
            return
        with ConsoleReporter() as reporter:
            if undo:
                result = rollouts.undo(reporter=reporter, hooks_dir=hooks_dir)
                print_json(result) if json_output else typer.echo(
                    "\n".join(
                        [f"rollout {result['id']} undone"]
                        + [f"  slot {s.slot}: release {s.release} {s.state}" for s in result["slots"]]
                        + [f"  {p}" for p in result["problems"]]
                    )
                )
                return
            done = rollouts.resume(reporter=reporter, hooks_dir=hooks_dir)
        print_json(done) if json_output else typer.echo("\n".join(done.lines()))
        return
    if profile is None:
        raise UsageError("say which profile to roll out: --profile NAME")
    if not dry_run:  # before the engine is asked anything: no card of a described host is here
        refuse_on_described_host(
            [f"--gpu {g}" for g in gpu or []] + (["--all-gpus"] if all_gpus else []), "rollout"
        )
    engine = engine_for_dry_run() if dry_run else Engine()
    slots, notes = rollout_slots(
        gpu, all_gpus, cpu, cpu_slot, profile_name=profile, profiles_dirs=profiles_dir, engine=engine
    )
    options = RolloutOptions(
        profile_name=profile,
        slots=slots,
        max_unavailable=max_unavailable,
        canary_qualify=canary_qualify,  # type: ignore[arg-type]
        undo_on_failure=undo_on_failure,
        qualify_limit=limit,
        profiles_dirs=profiles_dir,
        dry_run=dry_run,
        drain_timeout=drain_timeout,
        take_over=take_over,
    )
    if dry_run:
        plan, _ = rollouts.plan_for_rollout(options, engine=engine)
        plan.warnings += notes
        print_json({"dry_run": True, "plan": plan.to_json()}) if json_output else typer.echo(
            "\n".join(plan.lines())
        )
        return
    for note in notes:
        console_err.print(f"note: {note}", markup=False, highlight=False)
    with ConsoleReporter() as reporter:
        result = rollouts.rollout(options, reporter=reporter, engine=engine, hooks_dir=hooks_dir)
    print_json(result) if json_output else typer.echo("\n".join(result.lines()))


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

    names = (
        ([Slot().name] if cpu else [])
        + [cpu_slot_named(n).name for n in cpu_slot or []]
        + [slot_from_options(v.split(","), False).name for v in gpu or []]
    )
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
