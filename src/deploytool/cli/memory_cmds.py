"""plan-memory: what SGLang's memory pools will be, before anything starts."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import EXIT_FAILED
from .app import JsonOpt, ProfilesDirOpt, app, console, print_json

if TYPE_CHECKING:
    from ..memory.plan import MemoryPlan


@app.command("plan-memory")
def plan_memory_cli(
    profile: Annotated[str, typer.Option("--profile", help="Profile name (`deploytool profiles list`).")],
    gpu: Annotated[
        str | None,
        typer.Option(
            "--gpu", help="Plan for this GPU (UUID), read through NVML; UUID,UUID,... for a slot of several."
        ),
    ] = None,
    card: Annotated[
        str | None,
        typer.Option(
            "--card",
            help="Plan for a named card: rtx5090, rtx-pro-6000, h100, h200, b300, gb300; NAME:COUNT for several (e.g. h200:2).",
        ),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="What-if: a launch flag KEY=VALUE replacing the profile's (repeatable), e.g. mem-fraction-static=0.90.",
        ),
    ] = None,
    checkpoint: Annotated[
        Path | None,
        typer.Option(
            "--checkpoint",
            help="Read config.json and the safetensors index from this folder instead of the profile's model.host_path.",
        ),
    ] = None,
    patches: Annotated[
        str | None,
        typer.Option(
            "--patches",
            help="What-if: the image's patches to assume: `none`, `series` (every patch in the `series` file of the profile's series folder: image.source.series, else images/sglang/patches/<version>/) or file names separated by commas; default the profile's own.",
        ),
    ] = None,
    json_output: JsonOpt = False,
    profiles_dir: ProfilesDirOpt = None,
) -> None:
    """Predict the weights, KV bytes per token, state per request, KV pool and running requests
    SGLang will have, by its own accounting; exit 1 when the profile's demands do not fit."""
    from rich.table import Table

    from ..memory.profile_plan import plan_memory_command
    from ..memory.request import PlanMemoryRequest

    request = PlanMemoryRequest.from_options(
        profile,
        gpu=gpu,
        card=card,
        sets=set_,
        checkpoint=checkpoint,
        profiles_dirs=profiles_dir,
        patches=patches,
    )
    plan = plan_memory_command(request)
    if json_output:
        print_json(plan.as_dict())
    else:
        title = (
            f"{plan.profile} on {plan.gpus} x {plan.card} ({plan.card_source}), sglang {plan.sglang_version} "
            "accounting" + (f", what-if {plan.overrides}" if plan.overrides else "")
        )
        table = Table(title=title)
        table.add_column("")
        table.add_column("per GPU", justify="right")
        for label, value in _rows(plan):
            table.add_row(label, value)
        console.print(table)
        for problem in plan.problems:
            console.print(f"error: {problem}", markup=False, highlight=False)
        for warning in plan.warnings:
            console.print(f"warning: {warning}", markup=False, highlight=False)
        for note in plan.startup:
            if note["kind"] == "change":
                console.print(
                    f"SGLang will change: {note['flag']}: asked {note['asked']}, will use {note['uses']} "
                    f"({note['why']}); {note['fix']}",
                    markup=False,
                    highlight=False,
                )
        for item in plan.uncalibrated:
            console.print(f"not calibrated on a real card: {item['note']}", markup=False, highlight=False)
        console.print(
            "patches assumed: " + ("; ".join(plan.patches) if plan.patches else "none"),
            markup=False,
            highlight=False,
        )
        for assumption in plan.assumptions:
            console.print(f"assumed: {assumption}", markup=False, highlight=False)
    if not plan.fits:
        raise typer.Exit(EXIT_FAILED)


def _rows(plan: "MemoryPlan") -> list[tuple[str, str]]:
    state = "none"
    if plan.state_bytes_per_request:
        state = f"{plan.state_bytes_per_request / 2**20:.1f} MiB " + (
            f"({plan.state_slots} slots, {plan.state_slots_per_request} per request)"
            if plan.state_slots is not None
            else "(no slots: the weights leave no memory for the state on this card)"
        )
    return [
        # SGLang's pre_model_load_memory (the slack's base), then what is free when the weights load
        (
            "memory before loading: measured, free at load (GiB)",
            f"{plan.pre_model_load_gib:.2f}, {plan.free_before_load_gib:.2f}",
        ),
        ("weights: target model (GiB)", f"{plan.weights_gib:.2f}"),
        ("weights: draft model when the pool is sized (GiB)", f"{plan.draft_weights_gib:.2f}"),
        (f"slack: x (1 - mem-fraction-static {plan.mem_fraction_static}) (GiB)", f"{plan.slack_gib:.2f}"),
        (
            "linear-attention state, speculative state (GiB)",
            f"{plan.state_gib:.2f}, {plan.spec_state_gib:.2f}",
        ),
        (
            f"KV bytes per token ({plan.kv_cache_dtype}, full-attention layers)",
            f"{plan.kv_bytes_per_token:,}",
        ),
        ("KV bytes per token with the draft", f"{plan.kv_bytes_per_token_with_draft:,}"),
        ("state per running request", state),
        ("KV pool (GiB)", f"{plan.kv_pool_gib:.2f}"),
        ("KV pool (tokens)", f"{plan.pool_tokens:,}"),
        ("max running requests", str(plan.max_running_requests)),
        (f"requests at the full context ({plan.context_length:,})", str(plan.requests_at_full_context)),
        *[(f"beside the pool: {i['what']} ({i['source']})", f"{i['gib']:.2f}") for i in plan.beside_pool],
        ("highest mem-fraction-static that starts", _edge(plan)),
        ("verdict", plan.verdict),
    ]


def _edge(plan: "MemoryPlan") -> str:
    edge = plan.upper_edge
    if not edge:
        return "-"
    if edge["max_fraction"] is None:
        return "none"
    if edge["calibrated"]:
        return f"{edge['max_fraction']:.3f}"
    return f"{edge['max_fraction']:.3f} (uncalibrated; {edge['sure_fraction']} with the estimates doubled)"
