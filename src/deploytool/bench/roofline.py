"""The roofline beside bench's decode figures: the bandwidth-bound ceiling for decode at
concurrency 1 (and each sweep concurrency) and the measured figure's share of it.

Needs the profile's checkpoint config (model.host_path) and the card (NVML for a GPU slot, the
profile's card from the table otherwise); without either the run says why and carries none.
The arithmetic is deploytool.memory.roofline's (docs/bench.md, "Roofline").
"""

from __future__ import annotations

from typing import Any

from ..memory.cards import Card, card_from_gpu, card_from_table
from ..memory.checkpoint import read_checkpoint
from ..memory.profile_plan import checkpoint_folder
from ..memory.roofline import decode_roofline, with_measurements
from ..server.serverfields import find_key
from .results import BenchRun


def attach_roofline(run: BenchRun, target: Any) -> None:
    """Set run.roofline (a dict) or note why there is none. Never fails the run."""
    try:
        run.roofline = _roofline(run, target)
    except Exception as exc:  # a missing config field, an unknown card: say so, keep the figures
        run.notes.append(f"no roofline: {exc}")


def _roofline(run: BenchRun, target: Any) -> dict[str, Any] | None:
    profile = getattr(target, "profile", None)
    if profile is None:
        return None  # an endpoint by URL with no profile: no checkpoint, no card to say
    folder = checkpoint_folder(profile)
    if folder is None:
        if profile.is_simulator:
            return None  # nothing to say: the reference runtime loads no model
        run.notes.append(
            "no roofline: the profile's checkpoint config is not readable here (model.host_path)"
        )
        return None
    card = _card(target, profile)
    if card is None:
        run.notes.append("no roofline: no card to compare with (CPU slot, or a profile naming none)")
        return None
    args = profile.server.args
    info = run.server.get("server_info") or {}
    accept = find_key(info, "avg_spec_accept_length") if args.get("speculative-algorithm") else None
    method = run.method
    context = int(method.get("decode_prompt_tokens", 0)) + int(method.get("decode_output_tokens", 0)) // 2
    measured = {1: _median(run, "decode_c1")}
    measured.update({p.concurrency: p.per_user_tps for p in run.sweep})
    roofline = decode_roofline(
        read_checkpoint(folder),
        card,
        concurrencies=sorted(measured),
        context_tokens=context,
        kv_cache_dtype=str(args.get("kv-cache-dtype") or "auto"),
        tp_size=int(args.get("tp-size") or 1),
        mamba_ssm_dtype=args.get("mamba-ssm-dtype"),
        accept_length=accept,
        draft_tokens=args.get("speculative-num-draft-tokens"),
    )
    return with_measurements(roofline, measured).as_dict()


def _card(target: Any, profile: Any) -> Card | None:
    slot = getattr(target, "slot", None)
    uuids = list(getattr(slot, "gpus", ()) or ())
    if uuids:
        from ..host.gpus import read_inventory

        inventory = read_inventory()
        gpu = inventory.by_uuid(uuids[0]) if not inventory.error else None
        if gpu is not None:
            return card_from_gpu(gpu, count=len(uuids))
    if getattr(slot, "is_cpu", False) or not profile.match.gpu_name:
        return None
    return card_from_table(profile.match.gpu_name[0], count=profile.match.gpu_count)


def _median(run: BenchRun, group: str) -> float | None:
    # repeated passes: the figure is the median over passes; the first pass's group otherwise
    # (a workload without that figure, or a run file written before passes)
    figure = run.figure(f"{group}_tps")
    if figure is not None and figure.value is not None:
        return figure.value
    found = run.group(group)
    return found.decode_tps_median if found else None


def roofline_lines(roofline: dict[str, Any] | None) -> list[str]:
    """The roofline as text lines, for the CLI and report.md."""
    if not roofline:
        return []
    lines = [
        f"roofline on {roofline['card']} ({roofline['bandwidth_bytes_per_s'] / 1e12:.2f} TB/s"
        + (f", {roofline['power_limit_w']:g} W" if roofline.get("power_limit_w") else "")
        + "):"
    ]
    for p in roofline["points"]:
        measured = p.get("measured_tps_per_request")
        share = p.get("share")
        lines.append(
            f"  c={p['concurrency']}: ceiling {p['ceiling_tps_per_request']:.0f} tok/s per request "
            f"({p['bytes_per_step'] / 1e9:.2f} GB a step)"
            + (
                f", measured {measured:.1f} = {share:.0%} of it"
                if measured is not None and share is not None
                else ", not measured"
            )
        )
    lines += [f"  assumed: {a}" for a in roofline["assumptions"]]
    return lines
