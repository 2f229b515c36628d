"""`deploytool qualify`: run the acceptance suites against an endpoint or a slot's release."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from ..errors import EXIT_INTERRUPTED
from .app import (
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

if TYPE_CHECKING:
    from ..qualify.results import QualifyReport

_STYLE = {"passed": "green", "failed": "red", "error": "red", "skipped": "yellow"}


@app.command("qualify")
def qualify_command(
    url: UrlOpt = None,
    gpu: GpuOpt = None,
    cpu: CpuOpt = False,
    cpu_slot: CpuSlotOpt = None,
    profile: ProfileOpt = None,
    suite: Annotated[
        list[str] | None,
        typer.Option(
            "--suite",
            help="Run only this suite (repeatable); default: the profile's qualify.suites, else all that apply.",
        ),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option("--limit", help="Cap the items of data-driven suites (quick run; the report says so)."),
    ] = None,
    report: Annotated[
        Path | None,
        typer.Option(
            "--report",
            help="Report folder (default: under the state folder, with the slot's release: slots/<slot>/releases/<N>/reports/qualify-<UTC time>; `deploytool reports` lists them).",
        ),
    ] = None,
    against: Annotated[
        int | None,
        typer.Option(
            "--against",
            help="Compare with this release of the slot (its stored results) instead of the one that served before the qualified release was cut over.",
        ),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set", help="Override a suite setting, e.g. --set gsm8k.min_accuracy=0.9 (repeatable)."
        ),
    ] = None,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bars on stderr.")] = False,
    ready_timeout: ReadyTimeoutOpt = None,
    json_out: JsonOpt = False,
    profiles_dir: ProfilesDirOpt = None,
    api_key_file: ApiKeyFileOpt = None,
    api_key: ApiKeyOpt = None,
) -> None:
    """Run the acceptance suites; exit 0 when every gate passes, 1 when a gate fails, 6 when
    qualification could not run, 130 after Ctrl-C (the partial report is written)."""
    from ..qualify.config import parse_set_option
    from ..qualify.request import QualifyRequest, qualify
    from .slot_options import target_request_from_options

    overrides = parse_set_option(set_)  # a bad --set is refused before the slot is looked up
    request = QualifyRequest(
        target=target_request_from_options(
            url,
            gpu,
            cpu,
            cpu_slot,
            profile=profile,
            profiles_dir=profiles_dir,
            api_key_file=api_key_file,
            api_key=api_key,
            against=against,
        ),
        suites=tuple(suite) if suite is not None else None,
        limit=limit,
        report_dir=report,
        overrides=overrides,
        ready_timeout_s=ready_timeout,
    )
    result = qualify(request, reporter=ConsoleQualifyReporter(shown=not (no_progress or json_out)))
    _tell(result, json_out)


def _tell(result: "QualifyReport", json_out: bool) -> NoReturn:
    """The outcome on stdout (the summary table, or --json), what stopped it on stderr, and the
    exit code: the report's, or 130 after Ctrl-C."""
    from ..qualify.results import results_document

    if json_out and (result.could_not_run or result.interrupted):
        # an error object, as every --json command reports one (docs/json.md), with the
        # results document of what did run as its result
        json_error(
            f"could not run: {result.could_not_run}" if result.could_not_run else "interrupted (Ctrl-C)",
            f"report: {result.report_dir}",
            EXIT_INTERRUPTED if result.interrupted else result.exit_code,
            "Interrupted" if result.interrupted else "CouldNotRun",
            results_document(result),
        )
    elif json_out:
        print_json(results_document(result))
    else:
        _print_summary(result)
    if result.could_not_run:
        console_err.print("[bold red]error:[/] ", end="")  # what follows is the server's words: never markup
        console_err.print(f"could not run: {result.could_not_run}", markup=False, highlight=False)
    if result.interrupted:
        console_err.print(f"interrupted (Ctrl-C); partial report: {result.report_dir}", highlight=False)
        raise typer.Exit(EXIT_INTERRUPTED)
    raise typer.Exit(result.exit_code)


class ConsoleQualifyReporter:
    """qualify.runner.QualifyReporter for a terminal: one bar a suite on stderr (none with
    --no-progress or --json), and the probe's waiting lines while a server loads."""

    def __init__(self, shown: bool) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from .. import terminal_text

        self.shown, self.console = shown, terminal_text.console(stderr=True)
        self.bars = Progress(
            TextColumn("{task.description:<10}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[status]}"),
            console=self.console,
            disable=not shown,
            transient=False,
        )
        self.tasks: dict[str, Any] = {}

    def waiting(self, line: str) -> None:
        if self.shown:
            self.console.print(line, markup=False, highlight=False)

    def suite_started(self, name: str) -> None:
        self.tasks[name] = self.bars.add_task(name, total=None, status="")

    def suite_progress(self, name: str, advance: int | None, total: int | None) -> None:
        if total is not None:
            self.bars.update(self.tasks[name], total=total)
        if advance:
            self.bars.advance(self.tasks[name], advance)

    def suite_ended(self, name: str, status: str) -> None:
        task = self.tasks[name]
        if status == "interrupted":
            self.bars.update(task, status=status)
            return
        total = self.bars.tasks[task].total or 1
        self.bars.update(task, status=status, total=total, completed=total)

    def __enter__(self) -> "ConsoleQualifyReporter":
        self.bars.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bars.__exit__(None, None, None)


def _print_summary(result: "QualifyReport") -> None:
    from rich.table import Table
    from rich.text import Text

    # the reasons quote what the server said: cells of text, never read as markup
    table = Table(title=Text(f"qualify {result.url}"), show_lines=False)
    for column in ("suite", "verdict", "seconds"):
        table.add_column(column)
    table.add_column("reason", overflow="fold")  # never cut: the reason is the verdict's evidence
    for s in result.suites:
        verdict = s.verdict.value + (" (limited)" if s.limited else "")
        table.add_row(
            s.name,
            f"[{_STYLE.get(s.verdict.value, 'white')}]{verdict}[/]",
            f"{s.duration_s:.1f}",
            Text(s.reason or ""),
        )
    console.print(table)
    console.print(result.summary_line(), markup=False, highlight=False)


@app.command("reports")
def reports_command(
    gpu: GpuOpt = None, cpu: CpuOpt = False, cpu_slot: CpuSlotOpt = None, json_out: JsonOpt = False
) -> None:
    """List the qualify, bench and tune reports kept under the state folder (every slot, or one),
    oldest first: when, which slot and release, the verdict or the run, and the folder."""
    from ..checks.reports import list_reports
    from .slot_options import slot_from_options

    slot = slot_from_options(gpu, cpu, cpu_slot).name if (gpu or cpu or cpu_slot is not None) else None
    entries = list_reports(slot)
    if json_out:
        print_json({"reports": entries})
        return
    if not entries:
        console.print(
            "no reports kept yet"
            + (f" for slot {slot}" if slot else "")
            + " (qualify, bench and tune keep one under the state folder unless --report says elsewhere)",
            highlight=False,
        )
    for entry in entries:
        console.print(entry.line(), markup=False, highlight=False)


@app.command("report")
def report_command(
    release: Annotated[
        str,
        typer.Argument(
            help="A release number of the slot, or a report folder (holding a qualify results.json)."
        ),
    ],
    against: Annotated[
        str | None,
        typer.Option(
            "--against",
            help="The release (number or report folder) to compare with; default: the baseline the performance gate would choose (what served before RELEASE was cut over).",
        ),
    ] = None,
    gpu: GpuOpt = None,
    cpu: CpuOpt = False,
    cpu_slot: Annotated[str | None, typer.Option("--cpu-slot", help="A named CPU slot.")] = None,
    report: Annotated[
        Path | None,
        typer.Option(
            "--report",
            help="Report folder (default: slots/<slot>/releases/<N>/reports/report-<UTC time>, or reports/report-<UTC time> for two folders).",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Write the cutover report (verdict, the figures that matter beside the other release's with
    deltas and spread, what changed, pictures; every gate folded below) for any two releases."""
    from ..qualify.release_report import write_release_report
    from .slot_options import slot_from_options

    slot = slot_from_options(gpu, cpu, cpu_slot) if (gpu or cpu or cpu_slot) else None
    written = write_release_report(release, against, slot, report)
    if json_out:
        print_json(
            {
                "report": str(written.folder),
                "html": str(written.folder / "report.html"),
                "headline": written.headline,
                "release": written.release,
                "against": written.against,
            }
        )
        return
    console.print(written.last_line(), markup=False, highlight=False)
