"""Build and patches: build, patches check."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import EXIT_FAILED
from .app import (
    JsonOpt,
    ProfilesDirOpt,
    RequiredProfileOpt,
    Typer,
    app,
    console,
    console_err,
    print_json,
    styled,
)

if TYPE_CHECKING:
    from ..image.patches import PatchCheck
    from ..profiles import Profile

patches_app = Typer(help="The sglang patch series of a profile's image.", no_args_is_help=True)
app.add_typer(patches_app, name="patches")


@app.command("build")
def build_command(
    profile: RequiredProfileOpt,
    wheelhouse: Annotated[
        Path | None,
        typer.Option("--wheelhouse", help="Install from these wheels, with no index (air-gapped hosts)."),
    ] = None,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Do not reuse the engine's layer cache.")
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Print the image's tag, its inputs and its expected size and download; build nothing (no engine needed).",
        ),
    ] = False,
    lock: Annotated[
        bool,
        typer.Option(
            "--lock",
            help="Do not build: (re)write the profile's wheel locks in images/locks/ with pip's resolver (needs an index); with --wheelhouse, also download every locked wheel there.",
        ),
    ] = False,
    json_output: JsonOpt = False,
    profiles_dir: ProfilesDirOpt = None,
) -> None:
    """Build the profile's pinned image; prints its reference. A no-op when the inputs are unchanged."""
    from ..profiles import ProfileStore

    resolved = ProfileStore(profiles_dir).get(profile)
    if lock:
        _write_locks(resolved, wheelhouse, json_output)
    elif dry_run:
        _print_build_plan(resolved, wheelhouse, json_output)
    else:
        _build(resolved, wheelhouse, no_cache, json_output)


def _write_locks(resolved: "Profile", wheelhouse: Path | None, json_output: bool) -> None:
    """`build --lock`: the profile's wheel locks written again (and, with a wheelhouse, filled)."""
    from ..image.recipes.sglang import make_locks

    made = make_locks(resolved, wheelhouse=wheelhouse)
    if json_output:
        print_json(
            {"locks": [{"path": str(x.path), "wheels": len(x.wheels), "sha256": x.digest} for x in made]}
        )
        return
    for x in made:
        typer.echo(f"{x.path}: {len(x.wheels)} wheels, sha256 {x.digest[:16]}")


def _print_build_plan(resolved: "Profile", wheelhouse: Path | None, json_output: bool) -> None:
    """`build --dry-run`: the tag, its inputs and the expected size; nothing built."""
    from ..image.build import expected_size, plan_build

    planned = plan_build(resolved, wheelhouse=wheelhouse)
    size = expected_size(resolved)
    if json_output:
        print_json(
            {
                "dry_run": True,
                "image": planned.tag,
                "recipe": planned.recipe,
                "base": planned.base_ref,
                "base_pinned": planned.base_pinned,
                "inputs_hash": planned.inputs_hash,
                "inputs": planned.fingerprint,
                "steps": planned.steps,
                "expected_size": size,
            }
        )
        return
    typer.echo(f"build {resolved.name} ({planned.recipe} recipe) would make {planned.tag}")
    typer.echo(
        f"  base: {planned.base_ref} ("
        + ("pinned by digest" if planned.base_pinned else "by tag: resolved when the image is built")
        + ")"
    )
    typer.echo("  inputs (the tag is a hash of these):")
    for key, value in sorted(planned.fingerprint.items()):
        typer.echo(f"    {key}: {value}")
    typer.echo(f"  Dockerfile steps: {planned.steps}")
    typer.echo(f"  expected: {size}")


def _build(resolved: "Profile", wheelhouse: Path | None, no_cache: bool, json_output: bool) -> None:
    """The build itself, its Dockerfile steps as a progress bar on stderr (none with --json)."""
    from rich.progress import BarColumn, Progress, TextColumn

    from ..image.build import expected_size

    def starting(why: str) -> None:  # only once a build is sure to run: an up-to-date image costs nothing
        if not json_output:
            console_err.print(
                f"building {resolved.name} ({why}): expected {expected_size(resolved)}", highlight=False
            )

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[step]}"),
        console=console_err.rich,
        transient=True,
        disable=json_output,
    ) as bar:
        task = bar.add_task(f"building {resolved.name}", total=None, step="")

        def on_line(step: int, steps: int, line: str) -> None:
            bar.update(
                task,
                completed=step,
                total=steps,
                step=f"step {step}/{steps}",
                description=f"building {resolved.name}: {line[:60]}",
            )

        from ..image.build import build

        result = build(
            resolved, wheelhouse=wheelhouse, progress=on_line, no_cache=no_cache, on_start=starting
        )
    if json_output:
        print_json(
            {
                "image": result.image,
                "image_id": result.image_id,
                "built": result.built,
                "inputs_hash": result.inputs_hash,
                "labels": result.labels,
            }
        )
        return
    console_err.print(result.message, highlight=False)
    typer.echo(result.image)


@patches_app.command("check")
def patches_check(
    profile: RequiredProfileOpt, json_output: JsonOpt = False, profiles_dir: ProfilesDirOpt = None
) -> None:
    """Apply the profile's patch series to its pinned sglang (downloaded once, cached) in a
    temporary folder and report each patch as applied or failed with its refused hunks."""
    from rich.markup import escape
    from rich.table import Table

    from ..image import patches
    from ..profiles import ProfileStore

    prof = ProfileStore(profiles_dir).get(profile)
    source = (
        "" if prof.image.source.kind == "wheel" else f" (a {prof.image.source.kind} source: the fork's tree)"
    )
    console_err.print(
        f"checking the patch series of {prof.name} against sglang {prof.image.runtime_version}{source} ..."
    )
    report = patches.check(prof)
    if json_output:
        print_json({**report.__dict__, "ok": report.ok})
    else:
        table = Table("patch", "result", "files / refused hunks")
        for r in report.results:
            if r.applied:
                table.add_row(r.name, styled("applied"), escape(", ".join(r.files)))
            else:
                detail = r.error or "\n".join(
                    f"{x.file}, hunk {x.hunk}: {x.reason}\n{x.text}" for x in r.rejections
                )
                table.add_row(r.name, styled("failed"), escape(detail))
        for name in _not_reached(report):
            table.add_row(name, "[dim]not tried[/]", "an earlier patch failed")
        if not report.results and not report.expected:
            console.print(f"no patches for sglang {report.sglang_version} ({report.series})")
        else:
            console.print(table)
        console.print(
            f"sglang {report.sglang_version} ({report.wheel}): "
            + ("[green]the series applies[/]" if report.ok else "[red]the series does not apply[/]")
        )
    if not report.ok:
        raise typer.Exit(EXIT_FAILED)


def _not_reached(report: "PatchCheck") -> list[str]:
    from ..image import patches

    series = Path(report.series)
    done = {r.name for r in report.results}
    names = patches.unidiff.read_series(series / "series") if (series / "series").is_file() else []
    return [n for n in names if n not in done][: max(0, report.expected - len(report.results))]


@patches_app.command("import")
def patches_import(
    repo: Annotated[str, typer.Option("--from", help="The fork: a local repository or its URL.")],
    base: Annotated[
        str,
        typer.Option(
            "--base", help="The upstream release the fork branched from (a tag, e.g. v0.5.23, or a commit)."
        ),
    ],
    head: Annotated[str, typer.Option("--head", help="The fork's commit (or a ref) the series goes up to.")],
    out: Annotated[Path, typer.Option("--out", help="A new folder for the patches and their `series` file.")],
    subdir: Annotated[
        str | None,
        typer.Option(
            "--subdir",
            help="The folder of sglang's pyproject.toml in the repository (default: python/, else the top).",
        ),
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    """Write the series a fork's commits make over an upstream release: one patch per commit
    of BASE..HEAD, paths as in site-packages, and a `series` file. Use it with
    `image.source: {kind: wheel, series: OUT}`; `patches check` applies it."""
    from rich.markup import escape

    from ..image.series_import import import_series

    result = import_series(repo, base, head, out, subdir=subdir)
    if json_output:
        print_json(result)
        return
    console.print(
        escape(
            f"{len(result.names)} patch(es) over sglang {result.sglang_version} "
            f"({base} = {result.base_commit[:12]} .. {result.head_commit[:12]}) in {out}:"
        )
    )
    for name in result.names:
        console.print(escape(f"  {name}"))
    for why in result.left_out:
        console.print(escape(f"  left out: {why}"), style="yellow")
    console.print(
        escape(
            f"use it: image: {{source: {{kind: wheel, series: {out.resolve()}}}}}; "
            "then `deploytool patches check --profile NAME` applies it"
        )
    )
