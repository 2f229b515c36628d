"""Deploy: render, up, status, rollback, journal, cache."""

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

# Library modules are imported inside the commands: `deploytool --help` must not load the
# Docker SDK, pandas or the suites.
from ..host.slots import DEFAULT_RETENTION
from .slot_options import slot_from_options

if TYPE_CHECKING:
    from ..deploy.steps import Plan

from . import k8s_cmds
from .app import (
    CpuOpt,
    CpuSlotOpt,
    DrainOpt,
    GpuOpt,
    HooksOpt,
    JsonOpt,
    ProfileOpt,
    ProfilesDirOpt,
    RequiredProfileOpt,
    TakeOverOpt,
    Typer,
    app,
    console,
    console_err,
    print_json,
)
from .console_reporter import ConsoleReporter

cache_app = Typer(help="A slot's JIT kernel cache volume.", no_args_is_help=True)
app.add_typer(cache_app, name="cache")

PortOpt = Annotated[
    int | None, typer.Option("--port", help="Host port to publish on (default: the profile's).")
]
UpPortOpt = Annotated[
    int | None,
    typer.Option(
        "--port",
        help="Host port to publish on (default: the port the slot's release publishes on now, else the profile's).",
    ),
]
BindOpt = Annotated[
    str,
    typer.Option(
        "--bind",
        help="Host address to publish the port on (beyond loopback: the profile needs server.api_key, or --expose-without-key).",
    ),
]
ExposeOpt = Annotated[
    bool,
    typer.Option(
        "--expose-without-key",
        help="Publish beyond loopback (--bind) although the profile has no API key: recorded in the release's labels and the journal.",
    ),
]
RetentionOpt = Annotated[
    int, typer.Option("--retention", help="Stopped releases to keep per slot (counting the rollback target).")
]
# The wheels of `build --wheelhouse DIR` are inputs of the image's tag: the same folder names the same image.
WheelhouseOpt = Annotated[
    Path | None,
    typer.Option(
        "--wheelhouse",
        help="The image is built with `build --wheelhouse DIR` (its wheels are inputs of the tag): name that image; `up` builds it from DIR.",
    ),
]


# -- render ------------------------------------------------------------------------------------
@app.command("render")
def render_command(
    profile: RequiredProfileOpt,
    gpu: GpuOpt = None,
    cpu: CpuOpt = False,
    cpu_slot: CpuSlotOpt = None,
    release: Annotated[int, typer.Option("--release", help="Release number to render for.")] = 1,
    image: Annotated[
        str | None,
        typer.Option("--image", help="Image reference (default: what `build` would tag, without building)."),
    ] = None,
    port: PortOpt = None,
    bind: BindOpt = "127.0.0.1",
    expose_without_key: ExposeOpt = False,
    output: Annotated[
        Path | None,
        typer.Option("-o", "--output", help="Write to this file instead of stdout (with --k8s: a folder)."),
    ] = None,
    profiles_dir: ProfilesDirOpt = None,
    wheelhouse: WheelhouseOpt = None,
    k8s: Annotated[
        bool, typer.Option("--k8s", help="Render Kubernetes objects instead (docs/kubernetes.md).")
    ] = False,
    replicas: k8s_cmds.ReplicasOpt = 1,
    namespace: k8s_cmds.NamespaceOpt = "default",
    node_selector: k8s_cmds.NodeSelectorOpt = None,
    toleration: k8s_cmds.TolerationOpt = None,
    k8s_flavor: k8s_cmds.FlavorOpt = "plain",
    qualify_image: k8s_cmds.QualifyImageOpt = None,
) -> None:
    """Render the compose file of one release, or with --k8s its Kubernetes objects (--image by
    digest). Needs no engine: the image tag derives from the profile's declared inputs."""
    from ..deploy.render import render_compose

    if k8s:
        k8s_cmds.render_k8s(
            k8s_cmds.build_request(
                profile=profile,
                image=image,
                release=release,
                replicas=replicas,
                namespace=namespace,
                node_selector=node_selector,
                toleration=toleration,
                flavor=k8s_flavor,
                qualify_image=qualify_image,
                retention=DEFAULT_RETENTION,
                secret="deploytool",  # nosec B106: the Secret's name, never its value
                profiles_dir=profiles_dir,
            ),
            output,
        )
        return
    text = render_compose(
        profile,
        slot_from_options(gpu, cpu, cpu_slot),
        release=release,
        image=image,
        host_port=port,
        bind=bind,
        expose_without_key=expose_without_key,
        profiles_dirs=profiles_dir,
        wheelhouse=wheelhouse,
    )
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
        console_err.print(f"wrote {output}")
    else:
        typer.echo(text, nl=False)


# -- up / rollback / status --------------------------------------------------------------------
DryRunOpt = Annotated[
    bool,
    typer.Option(
        "--dry-run", help="Print the plan (steps, restore steps, rendered files) and change nothing."
    ),
]


def _plan_or_apply(
    dry_run: bool,
    json_output: bool,
    plan: Callable[[], "Plan"],
    apply: Callable[[ConsoleReporter], Any],
    say: Callable[[Any], str],
) -> None:
    """--dry-run prints the plan (as data with --json) and changes nothing; otherwise the
    command applies it, reporting progress on stderr, and prints its result."""
    if dry_run:
        made = plan()
        if json_output:
            print_json({"dry_run": True, "plan": made.to_json()})
        else:
            typer.echo("\n".join(made.lines()))
        return
    with ConsoleReporter() as reporter:
        result = apply(reporter)
    if json_output:
        print_json(result)
    else:
        typer.echo(say(result))


def _up_line(result: Any) -> str:
    note = " (simulator, not a model)" if result.profile.startswith("sim") else ""
    line = (
        f"release {result.release} of slot {result.slot} serves {result.profile}{note} at {result.url} "
        f"(previous: {result.previous or 'none'}; {result.seconds} s)"
    )
    folder = (result.qualify or {}).get("report_dir")
    # the cutover report (this release beside the one it replaced) is what a person opens next
    return f"{line}; cutover report: {folder}/report.html" if folder else line


@app.command("up")
def up_command(
    gpu: GpuOpt = None,
    cpu: CpuOpt = False,
    cpu_slot: CpuSlotOpt = None,
    profile: ProfileOpt = None,
    port: UpPortOpt = None,
    bind: BindOpt = "127.0.0.1",
    expose_without_key: ExposeOpt = False,
    skip_qualify: Annotated[
        bool,
        typer.Option("--skip-qualify", help="Cut over without acceptance suites (recorded in the journal)."),
    ] = False,
    skip_memory_plan: Annotated[
        bool,
        typer.Option(
            "--skip-memory-plan",
            help="Start even when the memory plan says the profile does not fit (recorded in the journal).",
        ),
    ] = False,
    suite: Annotated[
        list[str] | None, typer.Option("--suite", help="Qualify with only these suites (repeatable).")
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="Cap data-driven suites at N items.")] = None,
    retention: RetentionOpt = DEFAULT_RETENTION,
    dry_run: DryRunOpt = False,
    json_output: JsonOpt = False,
    profiles_dir: ProfilesDirOpt = None,
    hooks_dir: HooksOpt = None,
    wheelhouse: WheelhouseOpt = None,
    drain_timeout: DrainOpt = None,
    take_over: TakeOverOpt = False,
) -> None:
    """Build, start, health-gate, qualify and cut over a new release on a slot; the previous
    release is stopped, never removed, and restored if anything fails."""
    from ..deploy import commands as deploy
    from ..deploy.hooks import GatewayHooks
    from ..deploy.no_engine import engine_for_dry_run
    from ..deploy.up_checks import UpOptions

    slot = slot_from_options(gpu, cpu, cpu_slot)
    options = UpOptions(
        profile_name=profile,
        host_port=port,
        bind=bind,
        expose_without_key=expose_without_key,
        skip_qualify=skip_qualify,
        skip_memory_plan=skip_memory_plan,
        qualify_suites=tuple(suite) if suite is not None else None,
        qualify_limit=limit,
        retention=retention,
        profiles_dirs=tuple(profiles_dir) if profiles_dir else None,
        wheelhouse=wheelhouse,
        drain_timeout=drain_timeout,
        take_over=take_over,
    )
    _plan_or_apply(
        dry_run,
        json_output,
        lambda: deploy.plan_for_up(slot, replace(options, dry_run=True), engine=engine_for_dry_run()),
        lambda reporter: deploy.up(
            slot, options, reporter=reporter, hooks=GatewayHooks(hooks_dir, reporter=reporter)
        ),
        _up_line,
    )


@app.command("cpu-twin")
def cpu_twin_command(
    gpu: Annotated[
        list[str],
        typer.Option(
            "--gpu", help="GPU UUID of the slot whose release is twinned (repeat for several cards)."
        ),
    ],
    profile: ProfileOpt = None,
    port: Annotated[
        int | None,
        typer.Option(
            "--port",
            help="The port the release would publish on (in its document; not checked: the twin publishes none, so a server there does not stop it).",
        ),
    ] = None,
    bind: BindOpt = "127.0.0.1",
    expose_without_key: ExposeOpt = False,
    skip_memory_plan: Annotated[
        bool,
        typer.Option(
            "--skip-memory-plan",
            help="Plan the release even when the memory plan says it does not fit (as `up` would).",
        ),
    ] = False,
    wheelhouse: Annotated[
        Path | None,
        typer.Option(
            "--wheelhouse",
            help="The image was built with `build --wheelhouse DIR` (its wheels are inputs of the tag): run that image (the twin never builds one).",
        ),
    ] = None,
    image: Annotated[
        str | None, typer.Option("--image", help="Run the twin with this image instead of the release's.")
    ] = None,
    json_output: JsonOpt = False,
    profiles_dir: ProfilesDirOpt = None,
) -> None:
    """Start the CPU twin of the release `up --gpu` would make: its compose document without the
    GPU reservation, port and cache volume, whose entrypoint has sglang's own parser in the
    release's image parse the release's command; reports what it stored, whether the weights'
    config is where the runtime looks, and where sglang's start stops without a card. Removed
    afterwards; changes nothing of the slot (docs/deploy.md)."""
    from ..deploy.cpu_twin import run_cpu_twin
    from ..deploy.up_checks import UpOptions
    from ..errors import EXIT_FAILED

    slot = slot_from_options(gpu, False)
    options = UpOptions(
        profile_name=profile,
        host_port=port,
        bind=bind,
        expose_without_key=expose_without_key,
        skip_memory_plan=skip_memory_plan,
        profiles_dirs=tuple(profiles_dir) if profiles_dir else None,
        wheelhouse=wheelhouse,
    )
    result = run_cpu_twin(slot, options, image=image)
    if json_output:
        print_json(result.to_json())
    else:
        typer.echo("\n".join(result.lines()))
    if not result.ok:
        raise typer.Exit(EXIT_FAILED)


@app.command("rollback")
def rollback_command(
    gpu: GpuOpt = None,
    cpu: CpuOpt = False,
    cpu_slot: CpuSlotOpt = None,
    dry_run: DryRunOpt = False,
    json_output: JsonOpt = False,
    hooks_dir: HooksOpt = None,
    drain_timeout: DrainOpt = None,
    take_over: TakeOverOpt = False,
) -> None:
    """Stop the current release, start the slot's previous (stopped) one and verify it healthy;
    if it does not come up, the current release is started again."""
    from ..deploy import commands as deploy
    from ..deploy.hooks import GatewayHooks

    slot = slot_from_options(gpu, cpu, cpu_slot)
    _plan_or_apply(
        dry_run,
        json_output,
        lambda: deploy.plan_for_rollback(slot, drain_timeout=drain_timeout, take_over=take_over),
        lambda reporter: deploy.rollback(
            slot,
            reporter=reporter,
            drain_timeout=drain_timeout,
            hooks=GatewayHooks(hooks_dir, reporter=reporter),
            take_over=take_over,
        ),
        lambda r: (
            f"slot {r.slot}: release {r.release} serves again at {r.url}; "
            f"release {r.stopped} stopped ({r.seconds} s)"
        ),
    )


@app.command("prune")
def prune_command(
    gpu: GpuOpt = None,
    cpu: CpuOpt = False,
    cpu_slot: CpuSlotOpt = None,
    retention: RetentionOpt = DEFAULT_RETENTION,
    dry_run: DryRunOpt = False,
    json_output: JsonOpt = False,
) -> None:
    """Remove a slot's stopped releases beyond --retention, oldest first (`up` does this after
    each cut-over); never the current release or the rollback target."""
    from ..deploy import commands as deploy

    slot = slot_from_options(gpu, cpu, cpu_slot)
    _plan_or_apply(
        dry_run,
        json_output,
        lambda: deploy.plan_for_prune(slot, retention),
        lambda reporter: deploy.prune(slot, retention, reporter=reporter),
        lambda r: f"slot {r.slot}: pruned {', '.join(map(str, r.pruned)) or 'nothing'}",
    )


@app.command("status")
def status_command(json_output: JsonOpt = False) -> None:
    """What runs where: every slot, its releases, the rollback target, the last journal entries;
    the release that runs and the slot's pointer are named apart when they differ."""
    from ..deploy.status import status

    slots = status()
    if json_output:
        print_json({"slots": slots})
        return
    if not slots:
        typer.echo("no releases on this engine yet (`deploytool up --cpu --profile sim` starts one)")
        return
    from rich.table import Table  # only here: --json and an empty engine print without rich

    for s in slots:
        serving = f"release {s.serving} at {s.serving_url}" if s.serving is not None else "nothing"
        table = Table(title=f"slot {s.slot}: serving {serving}")
        for column in ("release", "role", "state", "health", "profile", "image", "model", "api key"):
            table.add_column(column, no_wrap=column == "model")
        for r in s.releases:
            profile = r["profile"] + (" (simulator)" if r["simulator"] else "")
            table.add_row(
                str(r["release"]),
                r["role"],
                r["state"],
                r["health"] or "-",
                profile,
                r["image"],
                _short_model(r.get("model")),
                r.get("api_key") or "-",
            )
        console.print(table)
        if s.disagreement:
            console.print(f"[yellow]pointer and engine disagree:[/] {s.disagreement}", highlight=False)


def _short_model(identity: str | None) -> str:
    """hub:ORG/NAME@commit[:12] or folder:NAME#fingerprint[:8]; --json has the whole identity."""
    if not identity:
        return "-"
    kind, _, rest = identity.partition(":")
    if kind == "hub":
        repo, _, commit = rest.rpartition("@")
        return f"hub:{repo}@{commit[:12]}"
    if kind == "folder":
        path, _, fingerprint = rest.rpartition("#")
        return f"folder:{Path(path).name}#{fingerprint.removeprefix('sha256:')[:8]}"
    return identity


@app.command("journal")
def journal_command(
    gpu: GpuOpt = None,
    cpu: CpuOpt = False,
    cpu_slot: CpuSlotOpt = None,
    limit: Annotated[int, typer.Option("--limit", help="Last N entries.")] = 20,
    json_output: JsonOpt = False,
) -> None:
    """The append-only journal of every action (optionally for one slot): one line per event,
    time (UTC), action, slot, release and what happened; --json gives the entries whole."""
    from ..deploy.journal_text import line
    from ..release.state import read_journal

    slot = slot_from_options(gpu, cpu, cpu_slot).name if (gpu or cpu or cpu_slot) else None
    entries = read_journal(slot, limit=limit)
    if json_output:
        print_json({"entries": entries})
        return
    for entry in entries:
        typer.echo(line(entry))


# -- cache -------------------------------------------------------------------------------------
@cache_app.command("status")
def cache_status(
    gpu: GpuOpt = None, cpu: CpuOpt = False, cpu_slot: CpuSlotOpt = None, json_output: JsonOpt = False
) -> None:
    """The slot's cache volume: its fingerprint, file count and size."""
    from ..deploy.cache_commands import cache_status as read_cache
    from ..yamlio import dump_yaml

    state = read_cache(slot_from_options(gpu, cpu, cpu_slot))
    if json_output:
        print_json(state)
        return
    typer.echo(
        f"{state.volume}: {'present' if state.exists else 'absent'}, {state.files} files, "
        f"{state.bytes / 1e6:.1f} MB"
    )
    typer.echo(dump_yaml({"fingerprint": state.fingerprint}), nl=False)


@cache_app.command("wipe")
def cache_wipe(
    gpu: GpuOpt = None, cpu: CpuOpt = False, cpu_slot: CpuSlotOpt = None, json_output: JsonOpt = False
) -> None:
    """Empty the slot's cache volume (the next `up` records a new fingerprint)."""
    from ..deploy.cache_commands import wipe_cache

    decision = wipe_cache(slot_from_options(gpu, cpu, cpu_slot))
    if json_output:
        print_json(decision)
        return
    typer.echo(f"{decision.volume}: wiped, {decision.files_removed} files removed")
