"""tune: search launch flags for the fastest launch that fits, holds its SLO and qualifies."""

from pathlib import Path
from typing import Annotated

import typer

from .app import CpuSlotOpt, GpuOpt, JsonOpt, ProfilesDirOpt, RequiredProfileOpt, app, console_err, print_json


@app.command("tune")
def tune_cli(
    profile: RequiredProfileOpt,
    local: Annotated[
        bool,
        typer.Option(
            "--local", help="Run candidates as local processes from this Python environment (no Docker)."
        ),
    ] = False,
    cpu_slot: CpuSlotOpt = None,
    gpu: GpuOpt = None,
    card: Annotated[
        str | None,
        typer.Option(
            "--card",
            help="Plan candidates for a named card (rtx5090, h200, ...); default the profile's match.gpu_name.",
        ),
    ] = None,
    workload: Annotated[
        str | None,
        typer.Option(
            "--workload",
            help="How each live server is loaded: `table` (the concurrency sweep of the space's `load`), `agentic`, `long-context` or `open-loop` (bench's workloads, sized by the space's `workload_settings`); default the space's `workload`, else table.",
        ),
    ] = None,
    slo: Annotated[
        str | None,
        typer.Option(
            "--slo", help="Latency targets over the space's: ttft_p99_ms=...,tpot_p99_ms=...,min_user_tps=..."
        ),
    ] = None,
    space: Annotated[
        Path | None,
        typer.Option(
            "--space", help="YAML file with the search space (the keys of a profile's `tune:` section)."
        ),
    ] = None,
    budget: Annotated[
        str | None,
        typer.Option("--budget", help="Stop cleanly before this much time is spent, e.g. 90m, 2h, 600s."),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Print the space, what the plan prunes and why, and the time estimate; start nothing.",
        ),
    ] = False,
    resume: Annotated[
        bool, typer.Option("--resume", help="Go on with the search journalled in --report DIR.")
    ] = False,
    report: Annotated[
        Path | None,
        typer.Option(
            "--report",
            help="Folder for the journal, logs, table, picture and winner profile (default: a new folder under the state folder's reports/, listed by `deploytool reports`; --resume needs it).",
        ),
    ] = None,
    port_range: Annotated[
        str | None,
        typer.Option(
            "--port-range",
            help="With --local: serve candidates on the first free port of FIRST-LAST (default any free port).",
        ),
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", help="Name of the winner's profile (default PROFILE-tuned).")
    ] = None,
    no_qualify: Annotated[
        bool,
        typer.Option("--no-qualify", help="Do not run qualify on the winner (it is then not recommended)."),
    ] = False,
    json_output: JsonOpt = False,
    profiles_dir: ProfilesDirOpt = None,
) -> None:
    """Find the fastest launch flags that fit the card, meet the SLO and still qualify; exit 1
    when none qualifies (the closest are named), 7 when --budget ran out before the race was
    decided (nothing recommended; --resume goes on)."""
    from ..tune import tune

    def progress(line: str) -> None:
        console_err.print(line, markup=False, highlight=False)

    outcome = tune(
        profile,
        local=local,
        cpu_slot=cpu_slot,
        gpus=gpu,
        card=card,
        workload=workload,
        slo=slo,
        space_file=space,
        budget=budget,
        dry_run=dry_run,
        resume=resume,
        report_dir=report,
        profiles_dirs=profiles_dir,
        name=name,
        qualify_winner=not no_qualify,
        port_range=port_range,
        progress=progress,
    )
    if json_output:
        print_json(outcome.data)
    else:
        for line in outcome.summary:
            typer.echo(line)
    raise typer.Exit(outcome.exit_code)
