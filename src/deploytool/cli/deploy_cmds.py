"""gpus, profiles, build, render, up, status, rollback, cache, journal."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .. import cache as cache_mod
from .. import deploy, gpus, images
from ..compose import RenderRequest, render_text
from ..engine import Engine
from ..errors import EXIT_NO_GPU, DeploytoolError, UsageError
from ..profiles import ProfileStore
from ..slots import slot_from_options
from ..state import read_journal, slot_lock
from ..yamlio import dump_yaml
from .app import (CpuOpt, GpuOpt, JsonOpt, ProfileOpt, ProfilesDirOpt, app, console, console_err,
                  print_json)

profiles_app = typer.Typer(help="Launch profiles: list, show, check.", no_args_is_help=True)
cache_app = typer.Typer(help="A slot's JIT kernel cache volume.", no_args_is_help=True)
app.add_typer(profiles_app, name="profiles")
app.add_typer(cache_app, name="cache")

PortOpt = Annotated[Optional[int], typer.Option("--port", help="Host port to publish on (default: the profile's).")]
BindOpt = Annotated[str, typer.Option("--bind", help="Host address to publish the port on.")]


class ConsoleReporter(deploy.Reporter):
    """Milestones as lines, long waits as one progress bar, on stderr."""

    def __init__(self) -> None:
        self._progress: Progress | None = None
        self._task = None

    def step(self, message: str) -> None:
        self._close()
        console_err.print(f"[cyan]•[/] {message}", highlight=False)

    def warn(self, message: str) -> None:
        self._close()
        console_err.print(f"[yellow]warning:[/] {message}", highlight=False)

    def waiting(self, label: str, elapsed: float, budget: float) -> None:
        if self._progress is None:
            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                                      TextColumn("budget {task.total:.0f} s"), console=console_err, transient=True)
            self._progress.start()
            self._task = self._progress.add_task(label, total=budget)
        self._progress.update(self._task, completed=min(elapsed, budget), description=label)

    def _close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def __enter__(self) -> "ConsoleReporter":
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()


# -- gpus --------------------------------------------------------------------------------------
@app.command("gpus")
def gpus_command(json_output: JsonOpt = False, profiles_dir: ProfilesDirOpt = None) -> None:
    """This machine's NVIDIA GPUs (through NVML) and the profiles made for each card."""
    inventory = gpus.read_inventory()
    if inventory.error:
        if json_output:
            print_json({"gpus": [], "error": inventory.error})
        else:
            console_err.print(f"no GPUs: {inventory.error}", highlight=False)
        raise typer.Exit(EXIT_NO_GPU)
    gpus.annotate_matches(inventory, ProfileStore(profiles_dir).all())
    if json_output:
        print_json(inventory)
        return
    table = Table(title=f"driver {inventory.driver_version}, CUDA {inventory.cuda_driver_version}")
    for column in ("#", "UUID", "name", "CC", "memory total/free (GiB)", "power limit (W)", "PCIe gen", "width",
                   "profiles"):
        table.add_column(column)
    for g in inventory.gpus:
        table.add_row(str(g.index), g.uuid, g.name, g.compute_capability or "?",
                      f"{_gib(g.memory_total_mib)} / {_gib(g.memory_free_mib)}",
                      _num(g.power_limit_w), f"{_num(g.pcie_link_gen)} (max {_num(g.pcie_link_gen_max)})",
                      f"x{_num(g.pcie_link_width)} (max x{_num(g.pcie_link_width_max)})",
                      ", ".join(g.matching_profiles) or "-")
    console.print(table)


def _gib(mib: int | None) -> str:
    return "?" if mib is None else f"{mib / 1024:.1f}"


def _num(value: object) -> str:
    return "?" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


# -- profiles ----------------------------------------------------------------------------------
@profiles_app.command("list")
def profiles_list(
    json_output: JsonOpt = False,
    profiles_dir: ProfilesDirOpt = None,
    gpu: GpuOpt = None,
    local: Annotated[bool, typer.Option("--local-gpus", help="Sort profiles against every local GPU.")] = False,
) -> None:
    """Every deployable profile; with --gpu UUID (or --local-gpus), sorted into runnable,
    runnable-with-less-memory and incompatible, with the reason for each."""
    store = ProfileStore(profiles_dir)
    profiles = store.all()
    if gpu or local:
        inventory = gpus.require_inventory()
        cards = inventory.gpus if local else []
        for uuid in gpu or []:
            card = inventory.by_uuid(uuid)
            if card is None:
                raise UsageError(f"--gpu {uuid}: no such GPU on this machine",
                                 hint=f"this machine's GPUs: {', '.join(g.uuid for g in inventory.gpus)}")
            cards.append(card)
        fits = sorted((gpus.classify(p, cards) for p in profiles),
                      key=lambda f: (["runnable", "runnable-with-less-memory", "incompatible"].index(f.verdict),
                                     f.profile))
        if json_output:
            print_json({"gpus": [c.uuid for c in cards], "profiles": fits})
            return
        table = Table("profile", "verdict", "why")
        for fit in fits:
            table.add_row(fit.profile, fit.verdict, "; ".join(fit.reasons))
        console.print(table)
        return
    rows = [{"name": p.name, "description": p.description, "recipe": p.image.recipe,
             "gpus": 0 if p.is_simulator else p.match.gpu_count, "cards": p.match.gpu_name,
             "served_name": p.model.served_name, "source": p.source} for p in profiles]
    if json_output:
        print_json({"profiles": rows})
        return
    table = Table("name", "recipe", "GPUs", "cards", "description")
    for r in rows:
        table.add_row(r["name"], r["recipe"], str(r["gpus"]), ", ".join(r["cards"]) or "-", r["description"])
    console.print(table)


@profiles_app.command("show")
def profiles_show(name: str, json_output: JsonOpt = False, profiles_dir: ProfilesDirOpt = None) -> None:
    """The fully resolved profile (after `extends`), as YAML or JSON."""
    profile = ProfileStore(profiles_dir).get(name)
    data = profile.model_dump(mode="json")
    if json_output:
        print_json({**data, "source": profile.source, "extends_chain": profile.chain})
        return
    typer.echo(f"# {profile.source} (extends chain: {' -> '.join(profile.chain)})")
    typer.echo(dump_yaml(data), nl=False)


# -- build / render ----------------------------------------------------------------------------
@app.command("build")
def build_command(
    profile: Annotated[str, typer.Option("--profile", help="Profile whose image to build.")],
    wheelhouse: Annotated[Optional[Path], typer.Option("--wheelhouse", help="Install from these wheels, with no index (air-gapped hosts).")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not reuse the engine's layer cache.")] = False,
    lock: Annotated[bool, typer.Option("--lock", help="Do not build: (re)write the profile's wheel locks in images/locks/ with pip's resolver (needs an index); with --wheelhouse, also download every locked wheel there.")] = False,
    json_output: JsonOpt = False,
    profiles_dir: ProfilesDirOpt = None,
) -> None:
    """Build the profile's pinned image; prints its reference. A no-op when the inputs are unchanged."""
    resolved = ProfileStore(profiles_dir).get(profile)
    if lock:
        from ..locks import make_locks

        made = make_locks(resolved, wheelhouse=wheelhouse)
        if json_output:
            print_json({"locks": [{"path": str(x.path), "wheels": len(x.wheels), "sha256": x.digest} for x in made]})
            return
        for x in made:
            typer.echo(f"{x.path}: {len(x.wheels)} wheels, sha256 {x.digest[:16]}")
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[step]}"),
                  console=console_err, transient=True, disable=json_output) as bar:
        task = bar.add_task(f"building {resolved.name}", total=None, step="")

        def on_line(step: int, steps: int, line: str) -> None:
            bar.update(task, completed=step, total=steps, step=f"step {step}/{steps}",
                       description=f"building {resolved.name}: {line[:60]}")

        result = images.build(resolved, wheelhouse=wheelhouse, progress=on_line, no_cache=no_cache)
    if json_output:
        print_json({"image": result.image, "image_id": result.image_id, "built": result.built,
                    "inputs_hash": result.inputs_hash, "labels": result.labels})
        return
    console_err.print(result.message, highlight=False)
    typer.echo(result.image)


@app.command("render")
def render_command(
    profile: Annotated[str, typer.Option("--profile", help="Profile to render.")],
    gpu: GpuOpt = None,
    cpu: CpuOpt = False,
    release: Annotated[int, typer.Option("--release", help="Release number to render for.")] = 1,
    image: Annotated[Optional[str], typer.Option("--image", help="Image reference (default: what `build` would tag, without building).")] = None,
    port: PortOpt = None,
    bind: BindOpt = "127.0.0.1",
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Write to this file instead of stdout.")] = None,
    profiles_dir: ProfilesDirOpt = None,
) -> None:
    """Render the compose file of one release (no engine needed when --image is given)."""
    slot = slot_from_options(gpu, cpu)
    resolved = ProfileStore(profiles_dir).get(profile)
    reference = image or _planned_tag(resolved)
    text = render_text(RenderRequest(profile=resolved, slot=slot, release=release, image=reference,
                                     host_port=port, bind=bind))
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
        console_err.print(f"wrote {output}")
    else:
        typer.echo(text, nl=False)


def _planned_tag(profile) -> str:
    engine = Engine()
    plan = images.plan_build(profile, engine)
    import shutil

    shutil.rmtree(plan.context_dir, ignore_errors=True)
    return plan.tag


# -- up / rollback / status --------------------------------------------------------------------
@app.command("up")
def up_command(
    gpu: GpuOpt = None,
    cpu: CpuOpt = False,
    profile: ProfileOpt = None,
    port: PortOpt = None,
    bind: BindOpt = "127.0.0.1",
    skip_qualify: Annotated[bool, typer.Option("--skip-qualify", help="Cut over without acceptance suites (recorded in the journal).")] = False,
    suite: Annotated[Optional[list[str]], typer.Option("--suite", help="Qualify with only these suites (repeatable).")] = None,
    limit: Annotated[Optional[int], typer.Option("--limit", help="Cap data-driven suites at N items.")] = None,
    retention: Annotated[int, typer.Option("--retention", help="Stopped releases to keep per slot.")] = deploy.DEFAULT_RETENTION,
    json_output: JsonOpt = False,
    profiles_dir: ProfilesDirOpt = None,
) -> None:
    """Build, start, health-gate, qualify and cut over a new release on a slot; the previous
    release is stopped, never removed, and restored if anything fails."""
    slot = slot_from_options(gpu, cpu)
    with ConsoleReporter() as reporter:
        result = deploy.up(slot, profile_name=profile, host_port=port, bind=bind, skip_qualify=skip_qualify,
                           qualify_suites=suite, qualify_limit=limit, retention=retention,
                           profiles_dirs=profiles_dir, reporter=reporter)
    if json_output:
        print_json(result)
        return
    note = " (simulator, not a model)" if result.profile.startswith("sim") else ""
    typer.echo(f"release {result.release} of slot {result.slot} serves {result.profile}{note} at {result.url} "
               f"(previous: {result.previous or 'none'}; {result.seconds} s)")


@app.command("rollback")
def rollback_command(gpu: GpuOpt = None, cpu: CpuOpt = False, json_output: JsonOpt = False) -> None:
    """Stop the current release, start the slot's previous (stopped) one and verify it healthy;
    if it does not come up, the current release is started again."""
    slot = slot_from_options(gpu, cpu)
    with ConsoleReporter() as reporter:
        result = deploy.rollback(slot, reporter=reporter)
    if json_output:
        print_json(result)
        return
    typer.echo(f"slot {result.slot}: release {result.release} serves again at {result.url}; "
               f"release {result.stopped} stopped ({result.seconds} s)")


@app.command("status")
def status_command(json_output: JsonOpt = False) -> None:
    """What runs where: every slot, its releases, the rollback target, the last journal entries."""
    slots = deploy.status()
    if json_output:
        print_json({"slots": slots})
        return
    if not slots:
        typer.echo("no releases on this engine yet (`deploytool up --cpu --profile sim` starts one)")
        return
    for s in slots:
        table = Table(title=f"slot {s.slot}: serving {s.serving_url or 'nothing'}")
        for column in ("release", "role", "state", "health", "profile", "image"):
            table.add_column(column)
        for r in s.releases:
            profile = r["profile"] + (" (simulator)" if r["simulator"] else "")
            table.add_row(str(r["release"]), r["role"], r["state"], r["health"] or "-", profile, r["image"])
        console.print(table)


@app.command("journal")
def journal_command(
    gpu: GpuOpt = None, cpu: CpuOpt = False,
    limit: Annotated[int, typer.Option("--limit", help="Last N entries.")] = 20,
    json_output: JsonOpt = False,
) -> None:
    """The append-only journal of every action (optionally for one slot)."""
    slot = slot_from_options(gpu, cpu).name if (gpu or cpu) else None
    entries = read_journal(slot, limit=limit)
    if json_output:
        print_json({"entries": entries})
        return
    for e in entries:
        rest = {k: v for k, v in e.items() if k not in ("time", "event", "instance")}
        typer.echo(f"{e['time']}  {e['event']:<18} {rest}")


# -- cache -------------------------------------------------------------------------------------
def _slot_image(engine: Engine, slot_name: str) -> str:
    releases = engine.releases(slot_name)
    if not releases:
        raise DeploytoolError(f"slot {slot_name} has no release, so no image to inspect its cache with",
                              hint="`deploytool up` creates the slot")
    return max(releases, key=lambda r: r.release).image


@cache_app.command("status")
def cache_status(gpu: GpuOpt = None, cpu: CpuOpt = False, json_output: JsonOpt = False) -> None:
    """The slot's cache volume: its fingerprint, file count and size."""
    slot = slot_from_options(gpu, cpu)
    engine = Engine()
    state = cache_mod.read_state(engine, _slot_image(engine, slot.name), slot)
    if json_output:
        print_json(state)
        return
    typer.echo(f"{state.volume}: {'present' if state.exists else 'absent'}, {state.files} files, "
               f"{state.bytes / 1e6:.1f} MB")
    typer.echo(dump_yaml({"fingerprint": state.fingerprint}), nl=False)


@cache_app.command("wipe")
def cache_wipe(gpu: GpuOpt = None, cpu: CpuOpt = False, json_output: JsonOpt = False) -> None:
    """Empty the slot's cache volume (the next `up` records a new fingerprint)."""
    slot = slot_from_options(gpu, cpu)
    engine = Engine()
    with slot_lock(slot.name, "cache wipe"):
        running = [r for r in engine.releases(slot.name) if r.running]
        if running:
            raise DeploytoolError(f"release {running[0].release} of slot {slot.name} is running and using the cache",
                                  hint="wipe while the slot is stopped; `deploytool up` wipes a stale cache itself")
        decision = cache_mod.wipe_slot_cache(engine, _slot_image(engine, slot.name), slot)
    if json_output:
        print_json(decision)
        return
    typer.echo(f"{decision.volume}: wiped, {decision.files_removed} files removed")
