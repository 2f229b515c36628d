"""`deploytool bench` and `deploytool compare`: parse, call deploytool.bench, print."""

from pathlib import Path
from typing import Annotated

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
            "--repeats", help="Passes of the workload (default 3); figures are medians over passes."
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
    from ..bench import build_method
    from ..bench.outcome import bench_when_ready
    from ..checks.targets import resolve_target

    if thinking not in ("on", "off"):
        raise UsageError(f"--thinking {thinking!r}: expected on or off")
    target = resolve_target(
        url=url,
        gpus=gpu,
        cpu=cpu,
        profile_name=profile,
        profiles_dirs=profiles_dir,
        api_key_file=api_key_file,
        api_key_flag=api_key,
        cpu_slot=cpu_slot,
    )
    method = _method(build_method, quick, target.profile, thinking, sweep, workload, repeats)
    console_err.print(
        f"bench {target.describe()}: {method.workload} workload, {method.preset} method "
        f"{method.fingerprint()}, {method.repeats} passes",
        highlight=False,
    )
    outcome = bench_when_ready(
        target,
        method=method,
        report_dir=report,
        ready_timeout_s=ready_timeout,
        timeout_name=READY_TIMEOUT_OPTION,
        progress=not json_out,
        on_wait=lambda line: console_err.print(line, markup=False, highlight=False),
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


def _print_run(run, report: Path | None) -> None:
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


def _method(build_method, quick, prof, thinking, sweep, workload, repeats):
    from ..bench.workloads import REGISTRY

    if workload not in REGISTRY:
        raise UsageError(f"--workload {workload!r}: no such workload", hint=f"known: {', '.join(REGISTRY)}")
    extra = {"repeats": repeats} if repeats is not None else {}
    if repeats is not None and repeats < 1:
        raise UsageError(f"--repeats {repeats}: expected at least 1")
    return build_method(
        quick=quick,
        profile_bench=prof.bench if prof else None,
        thinking=thinking == "on",
        sweep=sweep,
        profile_name=prof.name if prof else None,
        workload=workload,
        **extra,
    )


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
        typer.Option("--repeats", help="With --interleave or slots: passes per endpoint (default 3)."),
    ] = None,
    json_out: JsonOpt = False,
    profiles_dir: ProfilesDirOpt = None,
) -> None:
    """Put bench runs side by side: a column per run and a ratio (with its interval) against the
    first. With two slots (--gpu A --gpu B, --cpu-slot a --cpu-slot b): the same release on both,
    their qualification and a fresh bench (thinking off and on, passes interleaved), in the
    source's two-card table with each slot's power limit and PCIe link, saying which
    differences are beyond the measured spread."""
    if gpu or cpu or cpu_slot:
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
        _compare_slots(
            gpu,
            cpu,
            cpu_slot,
            quick=quick,
            repeats=repeats,
            report=report,
            json_out=json_out,
            profiles_dir=profiles_dir,
        )
        return
    if not runs:
        raise UsageError(
            "compare needs at least two runs, or two slots",
            hint="deploytool compare RUN_A RUN_B; deploytool compare --gpu UUID_A --gpu UUID_B",
        )
    from ..bench import build_method, compare_runs, write_comparison_report, write_run_report

    if interleave:
        from ..bench.interleave import run_interleaved
        from ..checks.targets import Target

        if len(runs) != 2 or not all(r.startswith(("http://", "https://")) for r in runs):
            raise UsageError(
                "--interleave takes two endpoint URLs", hint="deploytool compare --interleave URL_A URL_B"
            )
        method = _method(build_method, quick, None, "off", False, workload or "table", repeats)
        console_err.print(
            f"interleaving {runs[0]} and {runs[1]}: {method.workload} workload, {method.repeats} passes each",
            highlight=False,
        )
        run_a, run_b, comparison = run_interleaved(
            Target(url=runs[0], profile=None), Target(url=runs[1], profile=None), method
        )
        if report:
            write_run_report(run_a, report / "A")
            write_run_report(run_b, report / "B")
    else:
        comparison = compare_runs([Path(r) for r in runs], allow_mixed_methods=allow_mixed)
    if report:
        write_comparison_report(comparison, report)
    if json_out:
        print_json(comparison)
        return
    _print_comparison(comparison, report)


def _print_comparison(comparison, report: Path | None) -> None:
    from rich.table import Table

    names = [f"run {chr(65 + i)}" for i in range(len(comparison.runs))]
    for name, header in zip(names, comparison.runs):
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


def _compare_slots(
    gpu: list[str] | None,
    cpu: bool,
    cpu_slot: list[str] | None,
    *,
    quick: bool,
    repeats: int | None,
    report: Path | None,
    json_out: bool,
    profiles_dir: list[Path] | None,
) -> None:
    from ..bench import write_run_report
    from ..bench.slot_compare import compare_slots
    from ..checks.targets import resolve_target
    from ..files import write_json
    from ..host.slots import Slot, cpu_slot_named, slot_from_options

    if repeats is not None and repeats < 1:
        raise UsageError(f"--repeats {repeats}: expected at least 1")
    slots = (
        ([Slot()] if cpu else [])
        + [cpu_slot_named(n) for n in cpu_slot or []]
        + [slot_from_options(value.split(","), False) for value in gpu or []]
    )
    if len(slots) != 2 or slots[0].name == slots[1].name:
        raise UsageError(
            f"compare takes two different slots, got {len(slots)}: {', '.join(s.name for s in slots)}",
            hint="deploytool compare --gpu UUID_A --gpu UUID_B (or --cpu-slot a --cpu-slot b)",
        )
    targets = [
        resolve_target(url=None, gpus=None, cpu=False, profile_name=None, profiles_dirs=profiles_dir, slot=s)
        for s in slots
    ]
    console_err.print(
        f"comparing slots {slots[0].name} and {slots[1].name}: thinking off, then on, passes interleaved",
        highlight=False,
    )
    comparison, measured = compare_slots(targets, quick=quick, repeats=repeats)
    if report:
        for run, where in zip(
            measured, ("thinking-off/A", "thinking-off/B", "thinking-on/A", "thinking-on/B")
        ):
            write_run_report(run, report / where)
        write_json(report / "slots.json", comparison)
        (report / "slots.md").write_text("\n".join(_slot_text(comparison)) + "\n")
    if json_out:
        print_json(comparison)
        return
    typer.echo("\n".join(_slot_text(comparison)))


def _slot_text(comparison) -> list[str]:
    a, b = comparison.sides
    out = [
        f"the same release on two slots: {a.image} ({a.profile})"
        if comparison.same_image
        else f"two slots, two images: {a.image} ({a.profile}) and {b.image} ({b.profile})"
    ]
    for name, side in (("A", a), ("B", b)):
        cards = (
            "; ".join(f"{c['name']} {c['uuid']}, {c['power_limit_w']} W, {c['pcie']}" for c in side.cards)
            or "no card (reference runtime)"
        )
        out.append(f"  {name}: slot {side.slot}, release {side.release} at {side.url}: {cards}")
    out += [f"warning: {w}" for w in comparison.warnings] + [""] + comparison.table_lines()
    out += ["* beyond the measured spread: the two slots' ranges over passes do not overlap", ""]
    out += comparison.verdict_lines()
    out.append(
        f"measured: {comparison.preset} method, {comparison.repeats} passes per slot, interleaved "
        "(A B, B A, ...), thinking off then on; prefill measured with thinking off"
    )
    return out
