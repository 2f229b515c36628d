"""A profile's memory plan: find its checkpoint, its card, apply what-if settings, plan.

`check_memory_fit` is the pure decision `up` asks before it stops the serving release;
`plan_for_profile` is what `deploytool plan-memory` prints.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import DeploytoolError, FieldError, UsageError
from ..profiles import Profile
from .cards import Card, card_from_gpu, card_from_table, profile_card, slot_card
from .checkpoint import ModelShape, read_checkpoint
from .patch_effects import EFFECTS, PatchMemory, read_memory_effects
from .plan import MemoryPlan, PlanInputs, plan_memory
from .startup import SPEC_DEFAULT_RUNNING, StartupNote, refusals, startup_notes
from .what_if import check_sets

if TYPE_CHECKING:
    from .request import PlanMemoryRequest


def checkpoint_folder(profile: Profile) -> Path | None:
    """Where the profile's checkpoint can be read on this machine: the hub snapshot of
    model.hub in the host's hub cache (release/weights.ModelPlan.checkpoint_folder),
    model.host_path (mounted at model.path in the container), else model.path itself when it
    exists here."""
    snapshot = None
    if profile.model.hub:
        from ..release.weights import ModelMissing, check_model, plan_model

        with contextlib.suppress(ModelMissing):  # not in the cache: nothing to read here
            snapshot = check_model(plan_model(profile)).checkpoint_folder()
    return readable_config(profile, snapshot)


def readable_config(profile: Profile, snapshot: Path | None) -> Path | None:
    """checkpoint_folder() once the weights are checked (`up` checks them while it gathers its
    facts): `snapshot` is the hub snapshot that check found, None when there is none."""
    candidates: list[Any] = [snapshot, profile.model.host_path, profile.model.path]
    candidates.append(profile.model.config)  # last: the real checkpoint, once here, is what is read
    for candidate in candidates:
        if candidate and (Path(candidate) / "config.json").is_file():
            return Path(candidate)
    return None


def is_carried_config(profile: Profile, folder: Path | None) -> bool:
    """Whether `folder` is the configuration the profile carries rather than a checkpoint here."""
    return bool(folder and profile.model.config and Path(profile.model.config) == folder)


def no_checkpoint_hint(profile: Profile) -> str:
    """How to give the planner a config: what a person without the weights can do."""
    files = "config.json model.safetensors.index.json"
    if profile.model.hub:
        get = (
            f"`hf download {profile.model.hub} {files} --local-dir DIR` fetches the two files (kilobytes), "
            "then --checkpoint DIR"
        )
    else:
        get = "copy the checkpoint's config.json and model.safetensors.index.json into a folder, then --checkpoint DIR"
    return (
        f"{get}; or set model.config in the profile to such a folder (the shipped card profiles carry one, "
        "profiles/models/)"
    )


def assumed_patches(profile: Profile, names: list[str] | None = None) -> list[PatchMemory]:
    """The memory effects of the patches the profile's image applies (`names` instead: a
    what-if; [] for none), as its series' memory.yaml declares them."""
    if profile.image.recipe != "sglang" or not profile.image.runtime_version:
        return []
    from ..image.patches import series_folder, series_for

    if names is None:
        series = series_for(profile)
        folder, names = series.folder, series.names
    else:
        folder = series_folder(profile)
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            known = sorted(p.name for p in folder.glob("*.patch")) if folder.is_dir() else []
            raise FieldError(
                "patches",
                f"{', '.join(missing)} not in {folder}",
                hint="known: " + (", ".join(known) or "none") + "; or `none`, or `series`",
            )
    return read_memory_effects(folder, list(names))


def inputs_from_profile(
    profile: Profile, overrides: dict[str, Any] | None = None, patches: list[PatchMemory] | None = None
) -> PlanInputs:
    args = {**profile.server.args, **(overrides or {})}
    env = dict(profile.server.env)
    applied = assumed_patches(profile) if patches is None else patches
    effects = frozenset(e for p in applied if p.active(args, env) for e in p.effects)
    described = [
        f"{p.patch}: "
        + (
            "; ".join(EFFECTS[e] for e in p.effects)
            + p.condition()
            + ("" if p.active(args, env) else ", not turned on by this launch")
            if p.effects
            else "no change to the pools"
        )
        for p in applied
    ]
    preflight = profile.qualify.get("preflight") or {}
    mfs = args.get("mem-fraction-static")
    if mfs is None:
        raise UsageError(
            f"profile {profile.name} sets no mem-fraction-static",
            hint="the planner does not imitate SGLang's default heuristic (arg_groups/memory_hook.py): "
            "set server.args.mem-fraction-static, or try one with --set mem-fraction-static=0.88",
        )
    try:
        return PlanInputs(
            context_length=int(args.get("context-length") or profile.model.context_length),
            mem_fraction_static=float(mfs),
            kv_cache_dtype=str(args.get("kv-cache-dtype") or "auto"),
            max_running_requests=_opt_int(args.get("max-running-requests")) or _spec_running(args),
            tp_size=int(args.get("tp-size") or args.get("tensor-parallel-size") or 1),
            page_size=int(args.get("page-size") or 1),
            speculative_algorithm=args.get("speculative-algorithm") or None,
            speculative_num_draft_tokens=_opt_int(args.get("speculative-num-draft-tokens")),
            mamba_ssm_dtype=args.get("mamba-ssm-dtype") or profile.server.env.get("SGLANG_MAMBA_SSM_DTYPE"),
            max_total_tokens=_opt_int(args.get("max-total-tokens")),
            max_mamba_cache_size=_opt_int(args.get("max-mamba-cache-size")),
            mamba_full_memory_ratio=_opt_float(args.get("mamba-full-memory-ratio")),
            disable_radix_cache=bool(args.get("disable-radix-cache")),
            disable_overlap_schedule=bool(args.get("disable-overlap-schedule")),
            mamba_radix_cache_strategy=str(args.get("mamba-radix-cache-strategy") or "auto"),
            linear_attn_backend=str(args.get("linear-attn-backend") or "triton"),
            enable_linear_replayssm_spec=bool(args.get("enable-linear-replayssm-spec")),
            linear_replayssm_cache_len=int(args.get("linear-replayssm-cache-len") or 16),
            chunked_prefill_size=_opt_int(args.get("chunked-prefill-size")),
            cuda_graph_max_bs=_opt_int(args.get("cuda-graph-max-bs")),
            disable_cuda_graph=bool(args.get("disable-cuda-graph")),
            speculative_num_steps=_opt_int(args.get("speculative-num-steps")),
            pp_size=int(args.get("pp-size") or args.get("pipeline-parallel-size") or 1),
            dp_size=int(args.get("dp-size") or args.get("data-parallel-size") or 1),
            ep_size=int(args.get("ep-size") or args.get("expert-parallel-size") or 1),
            enable_dp_attention=bool(args.get("enable-dp-attention")),
            vlm_cache_bytes=int(profile.server.env.get("SGLANG_VLM_CACHE_SIZE_MB", 100)) << 20,
            runtime_version=profile.image.runtime_version if profile.image.recipe == "sglang" else None,
            min_running_requests=int(preflight.get("min_running_requests", 1)),
            require_full_context_kv=bool(preflight.get("require_full_context_kv", True)),
            patch_effects=effects,
            patches=described,
        )
    except (TypeError, ValueError) as exc:
        raise UsageError(
            f"profile {profile.name}: a launch setting the planner reads is not a number ({exc})",
            hint="check server.args and --set values",
        ) from None


def resolve_card(
    profile: Profile, *, gpu: str | None = None, card: str | None = None, inventory: Any = None
) -> Card:
    """--gpu UUID[,UUID...] reads NVML (the plan has those cards); --card NAME[:COUNT] the table
    (COUNT cards, else the profile's match.gpu_count); neither: the profile's first card name."""
    count = profile.match.gpu_count
    if gpu and card:
        raise FieldError("card", "names the card the GPU's UUID already names: give one of the two")
    if gpu:
        from ..host.gpus import require_inventory

        inventory = inventory or require_inventory(
            hint="--gpu reads the card through NVML: plan for a card of the table with --card NAME instead"
        )
        uuids = [u.strip() for u in gpu.split(",") if u.strip()]
        found = [inventory.card(u) for u in uuids]
        return card_from_gpu(found[0], count=len(found))
    if card:
        name, sep, number = card.rpartition(":")
        if sep:
            if not number.isdigit() or int(number) < 1:
                raise FieldError(
                    "card",
                    "expected NAME or NAME:COUNT with a whole number of cards, e.g. --card h200:2",
                    value=card,
                )
            return card_from_table(name, count=int(number))
        return card_from_table(card, count=count)
    if not profile.match.gpu_name:
        raise UsageError(
            f"profile {profile.name} names no card (match.gpu_name)",
            hint="say which with --card NAME or --gpu UUID",
        )
    return profile_card(profile)


def plan_for_profile(
    profile: Profile,
    card: Card,
    *,
    overrides: dict[str, Any] | None = None,
    shape: ModelShape | None = None,
    patches: list[str] | None = None,
) -> MemoryPlan:
    if profile.is_simulator and shape is None and checkpoint_folder(profile) is None:
        raise UsageError(
            f"profile {profile.name} is the reference runtime: it loads no checkpoint",
            hint="set model.host_path to a folder with a config.json to plan it anyway",
        )
    if shape is None:
        folder = checkpoint_folder(profile)
        if folder is None:
            where = f"the hub cache ({profile.model.hub}), " if profile.model.hub else ""
            raise UsageError(
                f"profile {profile.name}: no model config to plan from: none in {where}model.host_path "
                f"({profile.model.host_path or 'not set'}), model.path ({profile.model.path}) or "
                f"model.config ({profile.model.config or 'not set'})",
                hint=no_checkpoint_hint(profile),
            )
        shape = read_checkpoint(folder)
        carried = is_carried_config(profile, folder)
    else:
        carried = False
    return plan_from_shape(profile, card, shape, overrides=overrides, patches=patches, carried=carried)


def plan_from_shape(
    profile: Profile,
    card: Card,
    shape: ModelShape,
    *,
    overrides: dict[str, Any] | None = None,
    patches: list[str] | None = None,
    carried: bool = False,
) -> MemoryPlan:
    """plan_for_profile() once the checkpoint's shape is read (`up`'s memory gate reads it with
    its facts); `carried`: the shape is the config the profile carries, not weights here."""
    applied = assumed_patches(profile) if patches is None else assumed_patches(profile, patches)
    inputs = inputs_from_profile(profile, overrides, applied)
    args, env = {**profile.server.args, **(overrides or {})}, dict(profile.server.env)
    if not args.get("context-length"):
        # without the flag SGLang serves the context config.json derives: the gates read that
        inputs.context_length = shape.derived_context_length
    try:
        plan = plan_memory(shape, card, inputs, profile=profile.name, overrides=overrides)
    except ValueError as exc:
        # a launch SGLang refuses before it sizes anything (an FP4 KV cache on a Hopper card) is
        # that refusal, not a planner's gap
        refused = refusals(startup_notes(args, env, shape, compute_capability=card.compute_capability))
        if refused:
            raise StartupRefused(profile.name, refused) from None
        raise UsageError(f"profile {profile.name}: {exc}") from None
    plan.uncalibrated = [
        {"patch": p.patch, "note": note}
        for p in applied
        if p.active(args, env)
        if (note := p.uncalibrated(plan.card, plan.pool_tokens, plan.max_running_requests))
    ]
    if carried:
        plan.assumptions.insert(
            0,
            f"planned from the config the profile carries ({profile.model.config}): the "
            "weights are not here and are needed only to start; their size is the index's "
            "total_size (profiles/models/README.md)",
        )
    return with_startup(plan, args, env, shape, card, profile.model.context_length)


class StartupRefused(UsageError):
    """SGLang would refuse this launch at start-up (its own message in each note)."""

    def __init__(self, profile: str, notes: list[StartupNote]) -> None:
        super().__init__(
            f"profile {profile}: SGLang would refuse this launch at start-up:\n  "
            + "\n  ".join(f"{n.line()}\n    SGLang: {n.sglang_says}" for n in notes),
            hint="change what each line says; nothing was started or stopped",
        )
        self.notes = notes


def with_startup(
    plan: MemoryPlan,
    args: dict[str, Any],
    env: dict[str, Any],
    shape: ModelShape,
    card: Card,
    profile_context: int | None = None,
) -> MemoryPlan:
    """The plan with what SGLang refuses or changes at start-up: each note in `startup`, a
    refusal also among the problems (so `up` refuses before it stops anything)."""
    notes = startup_notes(
        args,
        env,
        shape,
        compute_capability=card.compute_capability,
        plan=plan,
        profile_context=profile_context,
    )
    plan.startup = [n.as_dict() for n in notes]
    for note in refusals(notes):
        line = f"{note.line()} (SGLang: {note.sglang_says})"
        if (
            not any(p.startswith("the weights") and "leave no memory" in p for p in plan.problems)
            or note.flag != "--mem-fraction-static"
        ):
            plan.problems.append(line)
    plan.verdict = "error" if plan.problems else plan.verdict
    return plan


def check_memory_fit(profile: Profile, card: Card | None) -> MemoryPlan | None:
    """`up`'s memory gate: the plan when the checkpoint is readable here, else None (nothing
    to judge by; `up` says so). Pure apart from reading the checkpoint's config files."""
    if card is None or checkpoint_folder(profile) is None:
        return None
    return plan_for_profile(profile, card)


def _spec_running(args: dict[str, Any]) -> int | None:
    """SGLang's speculative hook sets 48 running requests when the launch gives none, before
    anything is sized (arg_groups/speculative_hook.py)."""
    algo = args.get("speculative-algorithm")
    return SPEC_DEFAULT_RUNNING if algo and str(algo).upper() != "NONE" else None


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def plan_memory_command(request: PlanMemoryRequest) -> MemoryPlan:
    """What `deploytool plan-memory` does: the profile, its card, its checkpoint (or the folder
    given), the --set and --patches what-ifs, one plan."""
    from ..profiles import ProfileStore

    profile = ProfileStore(list(request.profiles_dirs) if request.profiles_dirs else None).get(
        request.profile_name
    )
    if profile.abstract:
        raise UsageError(
            f"profile {request.profile_name!r} is abstract (a base for others to extend); plan one that extends it"
        )
    chosen = resolve_card(profile, gpu=request.gpu, card=request.card)
    shape = None
    if request.checkpoint is not None:
        shape = read_checkpoint(request.checkpoint)
    names = list(request.patches) if isinstance(request.patches, tuple) else None
    if request.patches == "series":  # the whole series file, whatever the profile lists
        from ..image.in_image.unidiff import read_series
        from ..image.patches import series_folder

        names = read_series(series_folder(profile) / "series")
    overrides = dict(request.overrides)
    # only the person's what-ifs are checked: tune and the tests plan whole launches, whose flags
    # the planner may rightly ignore
    check_sets(
        overrides,
        assumed_patches(profile) if names is None else assumed_patches(profile, names),
        profile.server.args,
    )
    return plan_for_profile(profile, chosen, overrides=overrides, shape=shape, patches=names)


def plan_next_to_server(
    profile: Profile | None, slot: Any, server_info: dict[str, Any] | None
) -> dict[str, Any] | None:
    """For preflight: the plan for the profile's card beside the server's own memory figures;
    None when there is no checkpoint to plan from; {"error": why} when planning fails."""
    from .accuracy import compare_with_server

    if profile is None or checkpoint_folder(profile) is None:
        return None
    try:
        card = (
            slot_card(slot, profile)
            if slot is not None
            else (profile_card(profile) if profile.match.gpu_name else None)
        )
        if card is None:
            return {"error": "no card to plan for"}
        return compare_with_server(plan_for_profile(profile, card), server_info)
    except Exception as exc:  # a preflight records, it never fails on the planner
        return {"error": f"{type(exc).__name__}: {exc}"}


def memory_fit(
    profile: Profile, *, checkpoints: Path | None = None, card: Card | None = None
) -> dict[str, Any]:
    """What `profiles list` shows about a profile's memory plan on its own card (the table's
    figures for the profile's first match.gpu_name): {"verdict": "fits" | "error" | "unknown",
    ...}. The checkpoint config comes from `checkpoints`/<the model's folder name> when given,
    else from where `plan-memory` reads it; "unknown" says why there is nothing to plan."""
    if profile.is_simulator:
        return {"verdict": "unknown", "why": "the reference runtime loads no checkpoint"}
    if card is None and not profile.match.gpu_name:
        return {"verdict": "unknown", "why": "the profile names no card"}
    folder = _named_checkpoint(profile, checkpoints) if checkpoints else checkpoint_folder(profile)
    if folder is None:
        where = (
            f"in {checkpoints}" if checkpoints else "here (model.host_path, the hub cache, or model.config)"
        )
        return {"verdict": "unknown", "why": f"no checkpoint config {where}"}
    try:
        card = card or profile_card(profile)
        plan = plan_for_profile(profile, card, shape=read_checkpoint(folder))
    except DeploytoolError as exc:
        return {"verdict": "unknown", "why": exc.message}
    return {
        "verdict": plan.verdict,
        "card": plan.card,
        "pool_tokens": plan.pool_tokens,
        "max_running_requests": plan.max_running_requests,
        "checkpoint": str(folder),
        "patches": [p.split(":", 1)[0] for p in plan.patches],
        "problems": plan.problems,
        "max_mem_fraction_static": plan.max_mem_fraction_static,
    }


def _named_checkpoint(profile: Profile, root: Path) -> Path | None:
    """root/<the hub repository's name or the host folder's name>, matched without case."""
    name = (profile.model.hub or "").rsplit("/", 1)[-1] or Path(
        profile.model.host_path or profile.model.path or ""
    ).name
    if not name or not root.is_dir():
        return None
    for child in sorted(root.iterdir()):
        if child.name.lower() == name.lower() and (child / "config.json").is_file():
            return child
    return None
