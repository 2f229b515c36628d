"""`deploytool bench` and `deploytool compare`: parse, call deploytool.bench, print."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import UsageError
from .app import (
    READY_TIMEOUT_OPTION,
    ApiKeyFileOpt,
    ApiKeyOpt,
    CpuOpt,
    CpuSlotOpt,
    GpuOpt,
    JsonOpt,
    ProfileOpt,
    ProfilesDirOpt,
    ReadyTimeoutOpt,
    UrlOpt,
    app,
    console,
    console_err,
    json_error,
    print_json,
)
from .slot_options import slots_from_options, target_request_from_options

if TYPE_CHECKING:
    from ..bench.compare import Comparison
    from ..bench.request import CompareRequest
    from ..bench.results import BenchRun
    from ..host.slots import Slot


@app.command("bench")
def bench_command(
    url: UrlOpt = None,
    gpu: GpuOpt = None,
    cpu: CpuOpt = False,
    cpu_slot: CpuSlotOpt = None,
    profile: ProfileOpt = None,
    quick: Annotated[
        bool, typer.Option("--quick", help="The reduced method (fewer, shorter requests) for smoke runs.")
    ] = False,
    thinking: Annotated[
        str, typer.Option("--thinking", help="on: temperature 0.7 and the model's defaults; off: greedy.")
    ] = "off",
    sweep: Annotated[
        bool,
        typer.Option(
            "--sweep", help="Also sweep concurrency 1, 2, 4, ... up to the server's max running requests."
        ),
    ] = False,
    workload: Annotated[
        str,
        typer.Option(
            "--workload",
            help="Which named workload: table, long-context, agentic, open-loop, input-ablation (docs/bench.md).",
        ),
    ] = "table",
    repeats: Annotated[
        int | None,
        typer.Option(
            "--repeats", min=1, help="Passes of the workload (default 3); figures are medians over passes."
        ),
    ] = None,
    report: Annotated[
        Path | None,
        typer.Option(
            "--report",
            help="Write results.json, report.md and report.html here (default: under the state folder, with the slot's release; `deploytool reports` lists them).",
        ),
    ] = None,
    ready_timeout: ReadyTimeoutOpt = None,
    json_out: JsonOpt = False,
    profiles_dir: ProfilesDirOpt = None,
    api_key_file: ApiKeyFileOpt = None,
    api_key: ApiKeyOpt = None,
) -> None:
    """Measure an endpoint with a named workload (the source's table by default), in repeated passes (docs/bench.md)."""
    from ..bench.commands import bench
    from ..bench.request import BenchRequest

    if thinking not in ("on", "off"):
        raise UsageError(f"--thinking {thinking!r}: expected on or off")
    request = BenchRequest(
        target=target_request_from_options(
            url,
            gpu,
            cpu,
            cpu_slot,
            profile=profile,
            profiles_dir=profiles_dir,
            api_key_file=api_key_file,
            api_key=api_key,
        ),
        quick=quick,
        thinking=thinking == "on",
        sweep=sweep,
        workload=workload,
        repeats=repeats,
        report_dir=report,
        ready_timeout_s=ready_timeout,
    )
    outcome = bench(
        request,
        say=lambda line: console_err.print(line, highlight=False),
        on_wait=lambda line: console_err.print(line, markup=False, highlight=False),
        timeout_name=READY_TIMEOUT_OPTION,
        progress=not json_out,
    )
    run, code, why = outcome.run, outcome.exit_code, outcome.why
    if run is None:
        if json_out:
            json_error(f"bench: {why}", None, code, "CouldNotRun")
        _say_failed(why)
        raise typer.Exit(code)
    if json_out:
        print_json(run.to_json())
        if why:
            console_err.print(f"bench: {why}", markup=False, highlight=False)
        raise typer.Exit(code)
    _print_run(run, outcome.report_dir)
    if why:
        _say_failed(why)
    raise typer.Exit(code)


def _say_failed(why: str) -> None:
    console_err.print("[bold red]bench:[/] ", end="")  # why quotes the server: never markup
    console_err.print(why, markup=False, highlight=False)


def _print_run(run: "BenchRun", report: Path | None) -> None:
    from rich.table import Table
    from rich.text import Text

    from ..bench.compare import format_value
    from ..bench.roofline import roofline_lines

    table = Table(
        title=Text(
            f"bench {run.environment['target']} ({run.workload} workload, {run.method['preset']} method, "
            f"{run.method.get('repeats', 1)} passes)"
        )
    )
    for column in ("figure", "value", "spread over passes", "completed", "failed"):
        table.add_column(column, justify="left" if column == "figure" else "right")
    for fig in run.figures:
        spread = (
            f"{format_value(fig.spread[0], fig.unit)} - {format_value(fig.spread[1], fig.unit)}"
            if fig.spread and len(fig.repeat_values) > 1
            else ""
        )
        table.add_row(
            fig.label,
            format_value(fig.value, fig.unit),
            spread,
            str(fig.completed),
            f"[red]{fig.failed}[/]" if fig.failed else "0",
        )
    console.print(table)
    if run.sweep:
        sweep_table = Table(title="concurrency sweep (Pareto front marked *)")
        for column in ("concurrency", "per-user tok/s", "per-GPU tok/s", "TTFT p50", "failed"):
            sweep_table.add_column(column, justify="right")
        for p in run.sweep:
            sweep_table.add_row(
                f"{p.concurrency}{' *' if p.on_front else ''}",
                format_value(p.per_user_tps, ""),
                format_value(p.per_gpu_tps, ""),
                format_value(p.ttft_median_s, "s"),
                str(p.failed),
            )
        console.print(sweep_table)
    for line in roofline_lines(run.roofline):
        console.print(line, markup=False, highlight=False)
    if run.errors_total:
        console.print(
            f"[red]{run.errors_total} of {run.requests_total} requests failed[/]; medians use completed "
            "requests only"
        )
    console.print(
        f"prefix cache: {run.cache_check.message}",
        markup=False,
        highlight=False,
        style=None if run.cache_check.ok else "red",
    )
    if run.simulator:
        console.print(
            "[yellow]measured against the reference runtime: a simulator, not a model[/]", highlight=False
        )
    for note in run.notes:
        console.print(f"note: {note}", markup=False, highlight=False)
    if report:
        console.print(f"report: {report / 'report.html'}", highlight=False)


@app.command("compare")
def compare_command(
    runs: Annotated[
        list[str] | None,
        typer.Argument(
            help="Two or more results.json files or bench report folders; with --interleave, two endpoint URLs."
        ),
    ] = None,
    report: Annotated[
        Path | None, typer.Option("--report", help="Write comparison.json/.md/.html here.")
    ] = None,
    allow_mixed: Annotated[
        bool,
        typer.Option("--allow-mixed-methods", help="Show runs measured with different methods, flagged."),
    ] = False,
    interleave: Annotated[
        bool,
        typer.Option(
            "--interleave",
            help="Measure two endpoints now, their passes alternating (A B, B A, ...), then compare.",
        ),
    ] = False,
    gpu: Annotated[
        list[str] | None,
        typer.Option(
            "--gpu",
            help="A slot to compare (twice: the same release on two slots); a multi-card slot is its UUIDs joined by commas.",
        ),
    ] = None,
    cpu: CpuOpt = False,
    cpu_slot: Annotated[
        list[str] | None,
        typer.Option(
            "--cpu-slot", help="A CPU slot of the reference runtime to compare, cpu-NAME (repeatable)."
        ),
    ] = None,
    workload: Annotated[
        str | None, typer.Option("--workload", help="With --interleave: the workload to run (default table).")
    ] = None,
    quick: Annotated[
        bool, typer.Option("--quick", help="With --interleave or slots: the reduced method.")
    ] = False,
    repeats: Annotated[
        int | None,
        typer.Option("--repeats", min=1, help="With --interleave or slots: passes per endpoint (default 3)."),
    ] = None,
    json_out: JsonOpt = False,
    profiles_dir: ProfilesDirOpt = None,
) -> None:
    """Put bench runs side by side: a column per run and a ratio (with its interval) against the
    first. With two slots (--gpu A --gpu B, --cpu-slot a --cpu-slot b): the same release on both,
    their qualification and a fresh bench (thinking off and on, passes interleaved), in the
    source's two-card table with each slot's power limit and PCIe link, saying which
    differences are beyond the measured spread."""
    from ..bench.commands import compare
    from ..bench.slot_compare import SlotComparison

    request = _compare_request(
        runs or [],
        interleave=interleave,
        slots=slots_from_options(cpu, cpu_slot, gpu) if gpu or cpu or cpu_slot else None,
        workload=workload,
        allow_mixed=allow_mixed,
        quick=quick,
        repeats=repeats,
        report=report,
        profiles_dir=profiles_dir,
    )
    comparison = compare(request, say=lambda line: console_err.print(line, highlight=False))
    if json_out:
        print_json(comparison)
    elif isinstance(comparison, SlotComparison):
        typer.echo("\n".join(comparison.lines()))
    else:
        _print_comparison(comparison, report)


def _compare_request(
    runs: list[str],
    *,
    interleave: bool,
    slots: list["Slot"] | None,
    workload: str | None,
    allow_mixed: bool,
    quick: bool,
    repeats: int | None,
    report: Path | None,
    profiles_dir: list[Path] | None,
) -> "CompareRequest":
    """Which comparison the options ask for, its values checked."""
    from ..bench.request import CompareInterleaved, CompareRuns, CompareSlots

    if slots is not None:
        if runs or interleave:
            raise UsageError("compare takes runs (or --interleave URLs) or two slots, not both")
        # Two slots run the source's two-card table (thinking off and on) with one method on
        # both: there is no workload to choose and no mixed methods to allow.
        ignored = [
            flag
            for flag, given in (("--workload", workload is not None), ("--allow-mixed-methods", allow_mixed))
            if given
        ]
        if ignored:
            raise UsageError(
                f"{' and '.join(ignored)}: not for two slots, which run the two-card table with one "
                "method on both",
                hint="compare bench runs (or --interleave URLs) to use them",
            )
        dirs = tuple(profiles_dir) if profiles_dir else None
        return CompareSlots(tuple(slots), quick=quick, repeats=repeats, report_dir=report, profiles_dirs=dirs)
    if not runs:
        raise UsageError(
            "compare needs at least two runs, or two slots",
            hint="deploytool compare RUN_A RUN_B; deploytool compare --gpu UUID_A --gpu UUID_B",
        )
    if not interleave:
        return CompareRuns(tuple(Path(r) for r in runs), allow_mixed_methods=allow_mixed, report_dir=report)
    if len(runs) != 2 or not all(r.startswith(("http://", "https://")) for r in runs):
        raise UsageError(
            "--interleave takes two endpoint URLs", hint="deploytool compare --interleave URL_A URL_B"
        )
    return CompareInterleaved(
        (runs[0], runs[1]), workload=workload or "table", quick=quick, repeats=repeats, report_dir=report
    )


def _print_comparison(comparison: "Comparison", report: Path | None) -> None:
    from rich.table import Table

    names = [f"run {chr(65 + i)}" for i in range(len(comparison.runs))]
    for name, header in zip(names, comparison.runs, strict=True):
        console.print(
            f"{name}: {header.source} ({header.endpoint}, {header.started_at}, "
            f"{header.preset} method {header.method_fingerprint})",
            highlight=False,
        )
    for warning in comparison.warnings:
        console.print(f"[bold yellow]warning:[/] {warning}", highlight=False)
    table = Table()
    table.add_column("figure")
    for name in names:
        table.add_column(name, justify="right")
    for name in names[1:]:
        table.add_column(f"{names[0]} -> {name}", justify="right")
    from ..bench.compare import format_value

    for row in comparison.rows:
        cells = [format_value(v, row.unit) for v in row.values]
        for i in range(1, len(names)):
            verdict = row.verdict(i)
            colour = {"better": "green", "worse": "red"}.get(verdict or "", "")
            text = row.change_text(i)
            cells.append(f"[{colour}]{text}[/]" if colour else text)
        table.add_row(row.label, *cells)
    console.print(table)
    if report:
        console.print(f"report: {report / 'comparison.html'}", highlight=False)
