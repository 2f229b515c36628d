"""tune: search launch flags for the fastest launch that fits, holds its SLO and qualifies."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import UsageError
from .app import CpuSlotOpt, GpuOpt, JsonOpt, ProfilesDirOpt, RequiredProfileOpt, app, console_err, print_json
from .slot_options import slot_from_options

if TYPE_CHECKING:
    from ..tune.request import TuneRequest


# the options of `tune` beside the shared ones (app.py), named so that the command reads as a list
LocalOpt = Annotated[
    bool,
    typer.Option(
        "--local", help="Run candidates as local processes from this Python environment (no Docker)."
    ),
]
CardOpt = Annotated[
    str | None,
    typer.Option(
        "--card",
        help="Plan candidates for a named card (rtx5090, h200, ...); default the profile's match.gpu_name.",
    ),
]
WorkloadOpt = Annotated[
    str | None,
    typer.Option(
        "--workload",
        help="How each live server is loaded: `table` (the concurrency sweep of the space's `load`), `agentic`, `long-context` or `open-loop` (bench's workloads, sized by the space's `workload_settings`); default the space's `workload`, else table.",
    ),
]
SloOpt = Annotated[
    str | None,
    typer.Option(
        "--slo", help="Latency targets over the space's: ttft_p99_ms=...,tpot_p99_ms=...,min_user_tps=..."
    ),
]
SpaceOpt = Annotated[
    Path | None,
    typer.Option(
        "--space", help="YAML file with the search space (the keys of a profile's `tune:` section)."
    ),
]
BudgetOpt = Annotated[
    str | None,
    typer.Option("--budget", help="Stop cleanly before this much time is spent, e.g. 90m, 2h, 600s."),
]
DryRunOpt = Annotated[
    bool,
    typer.Option(
        "--dry-run",
        help="Print the space, what the plan prunes and why, and the time estimate; start nothing.",
    ),
]
ResumeOpt = Annotated[
    bool, typer.Option("--resume", help="Go on with the search journalled in --report DIR.")
]
ReportOpt = Annotated[
    Path | None,
    typer.Option(
        "--report",
        help="Folder for the journal, logs, table, picture and winner profile (default: a new folder under the state folder's reports/, listed by `deploytool reports`; --resume needs it).",
    ),
]
PortRangeOpt = Annotated[
    str | None,
    typer.Option(
        "--port-range",
        help="With --local: serve candidates on the first free port of FIRST-LAST (default any free port).",
    ),
]
NameOpt = Annotated[
    str | None, typer.Option("--name", help="Name of the winner's profile (default PROFILE-tuned).")
]
NoQualifyOpt = Annotated[
    bool, typer.Option("--no-qualify", help="Do not run qualify on the winner (it is then not recommended).")
]


@app.command("tune")
def tune_cli(
    profile: RequiredProfileOpt,
    local: LocalOpt = False,
    cpu_slot: CpuSlotOpt = None,
    gpu: GpuOpt = None,
    card: CardOpt = None,
    workload: WorkloadOpt = None,
    slo: SloOpt = None,
    space: SpaceOpt = None,
    budget: BudgetOpt = None,
    dry_run: DryRunOpt = False,
    resume: ResumeOpt = False,
    report: ReportOpt = None,
    port_range: PortRangeOpt = None,
    name: NameOpt = None,
    no_qualify: NoQualifyOpt = False,
    json_output: JsonOpt = False,
    profiles_dir: ProfilesDirOpt = None,
) -> None:
    """Find the fastest launch flags that fit the card, meet the SLO and still qualify; exit 1
    when none qualifies (the closest are named), 7 when --budget ran out before the race was
    decided (nothing recommended; --resume goes on)."""
    from ..tune import tune

    def progress(line: str) -> None:
        console_err.print(line, markup=False, highlight=False)

    request = tune_request(
        profile,
        local=local,
        cpu_slot=cpu_slot,
        gpu=gpu,
        card=card,
        workload=workload,
        slo=slo,
        space=space,
        budget=budget,
        dry_run=dry_run,
        resume=resume,
        report=report,
        port_range=port_range,
        name=name,
        no_qualify=no_qualify,
        profiles_dir=profiles_dir,
    )
    outcome = tune(request, progress=progress)
    if json_output:
        print_json(outcome.data)
    else:
        for line in outcome.summary:
            typer.echo(line)
    raise typer.Exit(outcome.exit_code)


def tune_request(
    profile: str,
    *,
    local: bool,
    cpu_slot: str | None,
    gpu: list[str] | None,
    card: str | None,
    workload: str | None,
    slo: str | None,
    space: Path | None,
    budget: str | None,
    dry_run: bool,
    resume: bool,
    report: Path | None,
    port_range: str | None,
    name: str | None,
    no_qualify: bool,
    profiles_dir: list[Path] | None,
) -> "TuneRequest":
    """The options as one request: where candidates run said once, the slot resolved, the SLO,
    budget and port range parsed."""
    from ..tune.local import parse_port_range
    from ..tune.request import TuneRequest
    from ..tune.space import parse_budget, parse_slo

    _one_place(local, cpu_slot, gpu, dry_run)
    ports = parse_port_range(port_range) if port_range else None
    return TuneRequest(
        profile_name=profile,
        local=local,
        slot=slot_from_options(gpu, False, cpu_slot) if gpu or cpu_slot else None,
        card=card,
        workload=workload,
        slo=parse_slo(slo),
        space_file=space,
        budget=parse_budget(budget),
        dry_run=dry_run,
        resume=resume,
        report_dir=report,
        profiles_dirs=tuple(profiles_dir) if profiles_dir else None,
        name=name,
        qualify_winner=not no_qualify,
        port_range=ports,
    )


def _one_place(local: bool, cpu_slot: str | None, gpu: list[str] | None, dry_run: bool) -> None:
    """Candidates run in one place, said by one of --local, --cpu-slot and --gpu (a dry run
    starts nothing and needs none)."""
    chosen = [w for w, on in (("--local", local), ("--cpu-slot", cpu_slot), ("--gpu", gpu)) if on]
    if len(chosen) > 1:
        raise UsageError(f"{' and '.join(chosen)}: say where candidates run once")
    if not chosen and not dry_run:
        raise UsageError("say where candidates run: --local, --cpu-slot NAME or --gpu UUID")
