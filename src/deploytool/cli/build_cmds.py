"""patches check, profiles check, doctor."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from .. import doctor as doctor_mod
from .. import flagcheck, patches
from ..errors import EXIT_FAILED, UsageError
from ..profiles import ProfileStore
from .app import JsonOpt, ProfilesDirOpt, app, console, console_err, print_json
from .deploy_cmds import profiles_app

patches_app = typer.Typer(help="The sglang patch series of a profile's image.", no_args_is_help=True)
app.add_typer(patches_app, name="patches")

_STYLE = {"pass": "green", "ok": "green", "applied": "green", "warn": "yellow", "redundant": "dim",
          "overridden": "yellow", "fail": "red", "failed": "red"}


def _styled(word: str) -> str:
    style = _STYLE.get(word, "red")
    return f"[{style}]{word}[/]"


@patches_app.command("check")
def patches_check(
    profile: Annotated[Optional[str], typer.Option("--profile", help="Profile whose patch series to check.")] = None,
    json_output: JsonOpt = False,
    profiles_dir: ProfilesDirOpt = None,
) -> None:
    """Apply the profile's patch series to its pinned sglang (downloaded once, cached) in a
    temporary folder and report each patch as applied or failed with its refused hunks."""
    if not profile:
        raise UsageError("patches check needs --profile NAME")
    prof = ProfileStore(profiles_dir).get(profile)
    console_err.print(f"checking the patch series of {prof.name} against sglang {prof.image.runtime_version} ...")
    report = patches.check(prof)
    if json_output:
        print_json({**report.__dict__, "ok": report.ok})
    else:
        table = Table("patch", "result", "files / refused hunks")
        for r in report.results:
            if r.applied:
                table.add_row(r.name, _styled("applied"), escape(", ".join(r.files)))
            else:
                detail = r.error or "\n".join(f"{x.file}, hunk {x.hunk}: {x.reason}\n{x.text}" for x in r.rejections)
                table.add_row(r.name, _styled("failed"), escape(detail))
        for name in _not_reached(report):
            table.add_row(name, "[dim]not tried[/]", "an earlier patch failed")
        if not report.results and not report.expected:
            console.print(f"no patches for sglang {report.sglang_version} ({report.series})")
        else:
            console.print(table)
        console.print(f"sglang {report.sglang_version} ({report.wheel}): "
                      + ("[green]the series applies[/]" if report.ok else "[red]the series does not apply[/]"))
    if not report.ok:
        raise typer.Exit(EXIT_FAILED)


def _not_reached(report: patches.PatchCheck) -> list[str]:
    series = patches.series_dir(report.sglang_version)
    done = {r.name for r in report.results}
    names = patches.unidiff.read_series(series / "series") if (series / "series").is_file() else []
    return [n for n in names if n not in done][: max(0, report.expected - len(report.results))]


@profiles_app.command("check")
def profiles_check(
    name: str,
    json_output: JsonOpt = False,
    profiles_dir: ProfilesDirOpt = None,
    no_image: Annotated[bool, typer.Option("--no-image", help="Use deploytool's parser venv even when the image exists.")] = False,
    resolve: Annotated[bool, typer.Option("--resolve", help="Also resolve derived values (needs the model's config where the parser runs).")] = False,
) -> None:
    """Check the profile's launch flags with the argument parser of its pinned sglang:
    unknown flags, invalid choices, wrong types, values sglang overrides."""
    profile = ProfileStore(profiles_dir).get(name)
    result = flagcheck.check(profile, use_image=not no_image, resolve=resolve)
    if json_output:
        print_json({**result.__dict__, "ok": result.ok})
    else:
        table = Table("flag", "given", "status", "detail")
        for f in result.findings:
            given = " ".join(map(str, f.given)) if isinstance(f.given, list) else str(f.given)
            table.add_row(f.flag, escape(given), _styled(f.status), escape(f.message))
        console.print(table)
        if result.parser_error:
            console.print(f"[red]sglang refuses the command line:[/] {escape(result.parser_error)}")
        for key, change in result.derived.items():
            console.print(escape(f"  derived: {key}: {change.get('before')!r} -> {change.get('after')!r}"))
        if result.resolve_note:
            console.print(f"[dim]{escape(result.resolve_note)}[/]")
        console.print(f"sglang {result.sglang_version} parser ({result.where}): "
                      + ("[green]all flags accepted[/]" if result.ok else f"[red]{len(result.failures) or 1} problem(s)[/]"))
    if not result.ok:
        raise typer.Exit(EXIT_FAILED)


@app.command("doctor")
def doctor_command(json_output: JsonOpt = False) -> None:
    """Is this host ready? Engine, compose, NVIDIA runtime, driver, disk, state directory."""
    report = doctor_mod.run_doctor()
    if json_output:
        print_json({"ok": report.ok, "counts": report.counts, "checks": report.checks})
    else:
        table = Table("check", "result", "detail")
        for c in report.checks:
            table.add_row(c.name, _styled(c.status),
                          escape(c.detail) + (f"\n[dim]hint: {escape(c.hint)}[/]" if c.hint and c.status != "pass" else ""))
        console.print(table)
        counts = report.counts
        console.print(f"{counts['pass']} pass, {counts['warn']} warn, {counts['fail']} fail")
    if not report.ok:
        raise typer.Exit(EXIT_FAILED)
