"""Profiles: list, show, check."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

import typer

from ..errors import EXIT_COULD_NOT_RUN, EXIT_FAILED, UsageError
from .app import GpuOpt, JsonOpt, ProfilesDirOpt, RequiredProfileOpt, Typer, app, console, print_json, styled

if TYPE_CHECKING:
    from ..host.card_slots import OfferedSlot
    from ..host.gpus import Inventory
    from ..image.flagcheck import FlagCheck
    from ..memory.startup_check import StartupCheck
    from ..profiles import Profile, ProfileStore

profiles_app = Typer(help="Launch profiles: list, show, check.", no_args_is_help=True)
app.add_typer(profiles_app, name="profiles")


# -- profiles ----------------------------------------------------------------------------------
@profiles_app.command("list")
def profiles_list(
    json_output: JsonOpt = False,
    profiles_dir: ProfilesDirOpt = None,
    gpu: GpuOpt = None,
    local: Annotated[
        bool,
        typer.Option(
            "--local-gpus", help="For each profile, the slots this host's cards make (`deploytool slots`)."
        ),
    ] = False,
    checkpoints: Annotated[
        Path | None,
        typer.Option(
            "--checkpoints",
            help="Plan memory from DIR/<model folder> (config.json and the safetensors index; the folder named as the hub repository or host folder) instead of the hub cache or model.host_path.",
        ),
    ] = None,
) -> None:
    """Every deployable profile, with whether its memory plan fits its card; with --gpu UUID (the
    cards of one slot), sorted into runnable, runnable-with-less-memory and incompatible, with
    every failed requirement; with --local-gpus, the slots this host's cards make for each profile
    (one per card for a one-card profile)."""
    from ..profiles import ProfileStore

    store = ProfileStore(profiles_dir)
    profiles = store.all()
    if gpu and local:
        raise UsageError(
            "give --local-gpus (the slots this host's cards make for each profile) or --gpu UUID "
            "(one slot of the cards you name), not both",
            hint="`deploytool slots --profile NAME` shows the slots of one profile",
        )
    if local:
        _local_slots(profiles, json_output)
        return
    if gpu:
        _fits_on_cards(profiles, gpu, json_output)
        return
    _own_cards(store, profiles, checkpoints, json_output)


class _ProfileRow(TypedDict):
    """One profile in `profiles list` (its --json row, in this order)."""

    name: str
    description: str
    recipe: str
    gpus: int
    cards: list[str]
    served_name: str
    source: str
    origin: str
    memory: dict[str, Any]  # memory_fit's verdict on the profile's own card


def _fits_on_cards(profiles: "list[Profile]", gpu: list[str], json_output: bool) -> None:
    """`profiles list --gpu UUID...`: each profile judged on the cards of the slot named."""
    from rich.table import Table

    from ..host import gpus
    from ..host.fit import VERDICT_ORDER
    from ..memory.gate import judged_fit
    from .slot_options import slot_from_options

    inventory = gpus.require_inventory(hint=_NO_CARDS_HINT)
    slot = slot_from_options(gpu, False)  # refuses a card named twice: it would count twice
    cards = [inventory.card(uuid) for uuid in slot.gpus]
    fits = sorted(
        (judged_fit(p, cards, inventory) for p in profiles),
        key=lambda f: (VERDICT_ORDER.index(f.verdict), f.profile),
    )
    if json_output:
        print_json({"gpus": [c.uuid for c in cards], "profiles": fits})
        return
    table = Table("profile", "verdict", "why")
    for fit in fits:
        table.add_row(fit.profile, fit.verdict, "; ".join(fit.reasons))
    console.print(table)


def _own_cards(
    store: "ProfileStore", profiles: "list[Profile]", checkpoints: Path | None, json_output: bool
) -> None:
    """`profiles list`: every profile with its memory plan on its own card, and the folders read."""
    from rich.markup import escape
    from rich.table import Table

    from ..memory.profile_plan import memory_fit

    rows = [
        _ProfileRow(
            name=p.name,
            description=p.description,
            recipe=p.image.recipe,
            gpus=0 if p.is_simulator else p.match.gpu_count,
            cards=p.match.gpu_name,
            served_name=p.model.served_name,
            source=p.source,
            origin=store.origin(p.name),
            memory=memory_fit(p, checkpoints=checkpoints),
        )
        for p in profiles
    ]
    if json_output:
        print_json({"profiles": rows})
        return
    table = Table("name", "recipe", "GPUs", "cards", "memory plan on its card", "from", "description")
    for r in rows:
        table.add_row(
            r["name"],
            r["recipe"],
            str(r["gpus"]),
            ", ".join(r["cards"]) or "-",
            escape(_memory_cell(r["memory"])),
            r["origin"],
            r["description"],
        )
    console.print(table)
    for folder, origin in store.folders:
        console.print(f"{origin}: {escape(str(folder))}", highlight=False)


def _memory_cell(fit: dict) -> str:
    if fit["verdict"] == "unknown":
        return "- (" + fit["why"] + ")"
    return f"{fit['verdict']}: {fit['pool_tokens']:,} tokens, {fit['max_running_requests']} requests"


@profiles_app.command("show")
def profiles_show(
    name: RequiredProfileOpt, json_output: JsonOpt = False, profiles_dir: ProfilesDirOpt = None
) -> None:
    """The fully resolved profile (after `extends`), as YAML or JSON."""
    from ..profiles import ProfileStore
    from ..yamlio import dump_yaml

    profile = ProfileStore(profiles_dir).get(name)
    data = profile.model_dump(mode="json")
    if json_output:
        print_json({**data, "source": profile.source, "extends_chain": profile.chain})
        return
    typer.echo(f"# {profile.source} (extends chain: {' -> '.join(profile.chain)})")
    typer.echo(dump_yaml(data), nl=False)


@profiles_app.command("check")
def profiles_check(
    name: Annotated[
        str | None, typer.Option("--profile", help="Profile name (`deploytool profiles list`).")
    ] = None,
    every: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Every sglang profile found (shipped and --profiles-dir), one parser start-up per place it runs.",
        ),
    ] = False,
    json_output: JsonOpt = False,
    profiles_dir: ProfilesDirOpt = None,
    no_image: Annotated[
        bool, typer.Option("--no-image", help="Use deploytool's parser venv even when the image exists.")
    ] = False,
    resolve: Annotated[
        bool,
        typer.Option(
            "--resolve", help="Also resolve derived values (needs the model's config where the parser runs)."
        ),
    ] = False,
    wheelhouse: Annotated[
        Path | None,
        typer.Option(
            "--wheelhouse",
            help="The image was built with `build --wheelhouse DIR`: look for that image's tag.",
        ),
    ] = None,
    checkpoint: Annotated[
        Path | None,
        typer.Option(
            "--checkpoint",
            help="Also run SGLang's own start-up checks with this folder's config.json (the model configuration it builds, the server-argument checks that need no card) and the start-up rules the planner says (one profile).",
        ),
    ] = None,
) -> None:
    """Check the profile's launch flags with the argument parser of its pinned sglang:
    unknown flags, invalid choices, wrong types, values sglang overrides. With --all, every
    sglang profile's (the others are listed as skipped, with why)."""
    from rich.markup import escape

    from ..image import flagcheck
    from ..profiles import ProfileStore

    if bool(name) == every:
        raise UsageError("give --profile NAME (one profile) or --all (every sglang profile), one of the two")
    store = ProfileStore(profiles_dir)
    skipped: list[dict[str, str]] = []
    if name:  # one profile (--all beside it is refused above)
        profiles = [store.get(name)]
    else:  # --all
        profiles = []
        for profile in store.all():
            if why := flagcheck.why_not_checkable(profile):
                skipped.append({"profile": profile.name, "why": why})
            else:
                profiles.append(profile)
    if checkpoint is not None:
        if every:
            raise UsageError("--checkpoint names one model's folder: give it with --profile NAME, not --all")
        from ..memory.startup_check import check_with_checkpoint

        checked = check_with_checkpoint(
            profiles[0], checkpoint, use_image=not no_image, wheelhouse=wheelhouse
        )
        if json_output:
            print_json(checked.as_dict())
        else:
            _print_check(checked.flags, table=True, label="")
            _print_startup(checked)
        if checked.flags.probe_error:
            raise typer.Exit(EXIT_COULD_NOT_RUN)
        if not checked.ok:
            raise typer.Exit(EXIT_FAILED)
        return
    results = flagcheck.check_many(profiles, use_image=not no_image, resolve=resolve, wheelhouse=wheelhouse)
    ok = all(r.ok for r in results)
    if json_output:
        one = [{**r.__dict__, "ok": r.ok} for r in results]
        print_json({"ok": ok, "profiles": one, "skipped": skipped} if every else one[0])
    else:
        for result in results:
            # one profile: every flag; all of them: a line each, the flags of the failing ones
            _print_check(
                result, table=not every or not result.ok, label=f"{result.profile}: " if every else ""
            )
        for skip in skipped:
            console.print(f"[dim]{escape(skip['profile'])}: skipped ({escape(skip['why'])})[/]")
    if any(r.probe_error for r in results):
        raise typer.Exit(EXIT_COULD_NOT_RUN)  # nothing is known of those flags: not a "no"
    if not ok:
        raise typer.Exit(EXIT_FAILED)


def _print_startup(checked: "StartupCheck") -> None:
    """SGLang's own start-up checks (run where its parser runs) and the rules the planner says."""
    from rich.markup import escape

    own = checked.flags.startup or {}
    if own.get("refused"):
        console.print(
            f"[red]SGLang refuses at start-up ({escape(str(own.get('where')))}):[/] {escape(own['refused'])}"
        )
    elif own.get("note"):
        console.print(f"[dim]{escape(own['note'])}[/]")
    elif own:
        console.print(f"SGLang's own start-up checks passed (context length {own.get('context_len')})")
    for line in own.get("said") or []:
        console.print(escape(f"  SGLang says: {line}"))
    for note in checked.notes:
        if note["kind"] == "refuse":
            console.print(
                f"[red]SGLang would refuse {escape(note['flag'])} {escape(str(note['asked']))}:[/] "
                f"{escape(note['why'])}; {escape(note['fix'])}\n  SGLang: {escape(note['sglang_says'])}"
            )
        else:
            console.print(
                escape(
                    f"SGLang will change {note['flag']}: asked {note['asked']}, will use {note['uses']} "
                    f"({note['why']}); {note['fix']}"
                )
            )
    if checked.plan_note:
        console.print(f"[dim]{escape(checked.plan_note)}[/]")


def _print_check(result: "FlagCheck", *, table: bool, label: str) -> None:
    """One profile's report: the flag table (when asked), what sglang refused or derived, and a
    summary line; with a label (several profiles), the summary first, so the details below it
    read as that profile's."""
    from rich.markup import escape
    from rich.table import Table

    summary = (
        escape(label)
        + f"sglang {result.sglang_version} parser ({escape(result.where)}): "
        + (
            "[green]all flags accepted[/]"
            if result.ok
            else "[red]the check itself failed[/]"
            if result.probe_error
            else f"[red]{len(result.failures) or 1} problem(s)[/]"
        )
    )
    if label:
        console.print(summary)
    if table and result.findings:
        rows = Table("flag", "given", "status", "detail")
        for f in result.findings:
            given = " ".join(map(str, f.given)) if isinstance(f.given, list) else str(f.given)
            rows.add_row(f.flag, escape(given), styled(f.status), escape(f.message))
        console.print(rows)
    if result.probe_error:
        console.print(f"[red]the probe failed on this profile:[/] {escape(result.probe_error)}")
    if result.parser_error:
        console.print(f"[red]sglang refuses the command line:[/] {escape(result.parser_error)}")
    for key, change in result.derived.items():
        console.print(escape(f"  derived: {key}: {change.get('before')!r} -> {change.get('after')!r}"))
    if result.resolve_note and table:
        console.print(f"[dim]{escape(result.resolve_note)}[/]")
    if not label:
        console.print(summary)


_NO_CARDS_HINT = (
    "`profiles list` without --gpu or --local-gpus lists every profile and its memory plan on its "
    "own card, without reading this host's cards"
)


def _slot_memory(profile: "Profile", slot: "OfferedSlot", inventory: "Inventory") -> dict[str, Any]:
    """The memory plan's verdict (both edges, the parallel sizes) on the slot's cards: the plan
    `up` would make there."""
    from ..memory.cards import card_from_gpu
    from ..memory.profile_plan import memory_fit

    gpu = inventory.by_uuid(slot.uuids[0])
    if gpu is None or gpu.memory_total_mib is None:
        return {"slot": slot.name, "verdict": "unknown", "why": "NVML reports no memory size"}
    return {"slot": slot.name, **memory_fit(profile, card=card_from_gpu(gpu, count=len(slot.uuids)))}


def _local_slots(profiles: list, json_output: bool) -> None:
    """Each profile with the slots this host's cards make for it: its verdict is its best slot's
    (incompatible with every card's problem when there is none)."""
    from rich.table import Table

    from ..host import gpus
    from ..host.fit import VERDICT_ORDER
    from ..memory.gate import slots_as_up_judges

    inventory = gpus.require_inventory(hint=_NO_CARDS_HINT)
    rows = []
    for profile in profiles:
        plan = slots_as_up_judges(profile, inventory)
        if profile.is_simulator:
            verdict, reasons = "runnable", ["the simulator needs no GPU: it runs on CPU slots"]
        elif plan.slots:
            best = min(plan.slots, key=lambda s: VERDICT_ORDER.index(s.verdict))
            verdict, reasons = best.verdict, best.reasons
        else:
            verdict = "incompatible"
            reasons = ([plan.note] if plan.note else []) + [
                f"{c['card']}: {c['why']}" for c in plan.unused
            ] + [f"{' + '.join(g.cards)}: {'; '.join(g.reasons)}" for g in plan.refused] or [
                "this host has no card"
            ]
        memory = [] if profile.is_simulator else [_slot_memory(profile, s, inventory) for s in plan.slots]
        rows.append(
            {
                "profile": profile.name,
                "verdict": verdict,
                "reasons": reasons,
                "gpu_count": plan.gpu_count,
                "slots": plan.slots,
                "refused": plan.refused,
                "unused": plan.unused,
                "memory": memory,
            }
        )
    rows.sort(key=lambda r: (VERDICT_ORDER.index(r["verdict"]), r["profile"]))
    if json_output:
        print_json({"gpus": [g.uuid for g in inventory.gpus], "source": inventory.source, "profiles": rows})
        return
    table = Table("profile", "verdict", "slots on this host", "why")
    for r in rows:
        slots = (
            "\n".join(
                f"{s.name} ({' + '.join(s.cards)}{', ' + s.link if len(s.cards) > 1 else ''}): {s.verdict}"
                + (f", memory plan {m['verdict']}" if m else "")
                # one memory plan per slot (none at all for the simulator): the lengths match
                for s, m in zip(r["slots"], r["memory"] or [None] * len(r["slots"]), strict=True)
            )
            or "-"
        )
        table.add_row(r["profile"], r["verdict"], slots, "; ".join(r["reasons"]))
    console.print(table)
