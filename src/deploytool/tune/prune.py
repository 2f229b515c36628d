"""Prune without starting: every candidate is planned by the memory planner (`plan-memory`'s
arithmetic) on the card it will run on; a launch that does not fit the card at either edge (too
little for the pool, or a fraction that leaves too little beside it for the graphs and the
chunk's activations), asks for more cards than the plan has, or misses the profile's own gates
(a full-context conversation in the pool, the running requests preflight asks for), is dropped
with the planner's reason and is never started. A reference-runtime candidate whose launch
carries the runtime's memory rule (`gpu-memory-gib`) is judged by that rule (edge_rule.py, the
one the runtime applies), so no candidate is started to die of memory. Candidates dropped for
the same reason share one lesson (`lesson`): the report counts it once. The knobs SGLang couples
to the plan are filled in here (space.DERIVED)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..edge_rule import sim_beside_pool, sim_max_fraction
from ..errors import DeploytoolError, UsageError
from ..memory.cards import Card
from ..memory.profile_plan import checkpoint_folder, plan_for_profile
from ..profiles import Profile
from .space import Candidate, TuneSpace, with_args


@dataclass
class Planned:
    """A candidate after the planner: kept or pruned, with the plan's figures."""

    candidate: Candidate
    pruned: str | None = None  # why, when dropped
    lesson: str | None = None  # the reason shared by every candidate dropped for it
    pool_tokens: int | None = None
    running_limit: int | None = None
    warnings: list[str] = field(default_factory=list)
    # what a decode step reads (tune/predict.py's roofline): the weights, and KV bytes per token
    weights_gib: float | None = None
    kv_bytes_per_token: int | None = None

    def as_dict(self) -> dict[str, Any]:
        c = self.candidate
        return {
            "id": c.id,
            "changes": c.changes,
            "derived": c.derived,
            "pruned": self.pruned,
            "lesson": self.lesson,
            "plan": {
                "kv_tokens": self.pool_tokens,
                "running_limit": self.running_limit,
                "warnings": self.warnings,
            },
        }


def plannable(profile: Profile) -> str | None:
    """Why the profile's candidates cannot be planned; None when they can."""
    if checkpoint_folder(profile) is None:
        if profile.is_simulator:
            return "the reference runtime loads no checkpoint (set model.host_path to a folder with a config.json)"
        return (
            f"no checkpoint config readable at model.host_path ({profile.model.host_path or 'not set'}) "
            f"or model.path ({profile.model.path})"
        )
    return None


def plan_candidates(
    profile: Profile, cands: list[Candidate], space: TuneSpace, card: Card | None
) -> tuple[list[Planned], str | None]:
    """Each candidate planned (derived knobs filled); the note says why nothing was planned."""
    why_not = plannable(profile) if card is not None else "no card to plan for"
    if why_not and not profile.is_simulator:
        raise UsageError(
            f"profile {profile.name}: candidates cannot be planned: {why_not}",
            hint="tune plans every candidate before it starts one; give the checkpoint's config.json "
            "(model.host_path) and the card (--card NAME or the profile's match.gpu_name)",
        )
    out: list[Planned] = []
    for cand in cands:
        # the profile's own launch is measured as written: it is what every speedup is against
        if cand.id != "base":
            _derive_before_plan(cand, space)
        planned = Planned(cand)
        if why_not is None and card is not None:
            try:
                plan = plan_for_profile(cand.profile, card)
            except DeploytoolError as exc:
                planned.pruned = f"the planner refused it: {exc.message}"
                out.append(planned)
                continue
            planned.pool_tokens, planned.running_limit = plan.pool_tokens, plan.max_running_requests
            planned.weights_gib, planned.kv_bytes_per_token = plan.weights_gib, plan.kv_bytes_per_token
            planned.warnings = list(plan.warnings)
            if not plan.fits:
                planned.pruned = "; ".join(plan.problems) or "does not fit"
                planned.lesson = _lesson(plan.problems, plan.max_mem_fraction_static)
        elif isinstance(cand.args.get("max-running-requests"), int):
            planned.running_limit = int(cand.args["max-running-requests"])
        if planned.pruned is None and cand.id != "base":
            _derive_after_plan(cand, space, planned.running_limit)
        # the reference runtime's own rule, on the launch as it will start (derived knobs filled)
        sim_rule = _sim_memory_rule(cand) if profile.is_simulator and planned.pruned is None else None
        if sim_rule is not None and sim_rule[0]:
            planned.pruned, planned.lesson = sim_rule
        out.append(planned)
    return out, why_not


def lessons(planned: list[Planned]) -> dict[str, list[str]]:
    """Each reason candidates were dropped for, with the candidates it dropped: two candidates
    that fail for the same reason are one lesson."""
    out: dict[str, list[str]] = {}
    for p in planned:
        if p.lesson:
            out.setdefault(p.lesson, []).append(p.candidate.id)
    return out


def _lesson(problems: list[str], max_fraction: float | None) -> str:
    if any("leaves too little beside the pool" in p for p in problems):
        return f"upper edge: mem-fraction-static above {max_fraction}"
    if any("GPUs, and the plan has" in p for p in problems):
        return "more cards than the plan has"
    if any(p.startswith("the weights") for p in problems):
        return "lower edge: the weights leave no pool"
    return problems[0].split(":")[0] if problems else "does not fit"


def _sim_memory_rule(cand: Candidate) -> tuple[str | None, str | None] | None:
    """The reference runtime's own memory rule on this launch (sim/launch_rules.py applies the
    same edge_rule): (why dropped or None, its lesson); None when the launch has no memory rule."""
    args = cand.args
    gpu, fraction = args.get("gpu-memory-gib"), args.get("mem-fraction-static")
    if gpu is None or fraction is None:
        return None
    try:
        gpu, fraction = float(gpu), float(fraction)
        pool = gpu * fraction - float(args.get("weights-gib") or 0)
        items = sim_beside_pool(
            activation_gib=_num(args.get("activation-gib")),
            graph_mib_per_bs=_num(args.get("graph-mib-per-bs")) or 0,
            chunk_mib_per_token=_num(args.get("chunk-mib-per-token")) or 0,
            cuda_graph_max_bs=int(args["cuda-graph-max-bs"]) if args.get("cuda-graph-max-bs") else None,
            disable_cuda_graph=bool(args.get("disable-cuda-graph")),
            chunked_prefill_size=int(args.get("chunked-prefill-size") or 8192),
            speculative=(_num(args.get("spec-accept-rate")) or 0) > 0,
        )
    except (TypeError, ValueError):
        return None  # the runtime refuses a bad number itself, before any memory
    if pool * (1 << 30) < float(args.get("kv-bytes-per-token") or 65536):
        return (
            f"the weights ({args.get('weights-gib')} GiB) leave no pool in {gpu} GiB x {fraction}: the runtime "
            "refuses the start (Not enough memory)",
            "lower edge: the weights leave no pool",
        )
    top = sim_max_fraction(gpu, items)
    if top is None or fraction > top + 1e-9:
        need = sum(i.bytes for i in items) / (1 << 30)
        return (
            f"mem-fraction-static {fraction} leaves {gpu * (1 - fraction):.2f} GiB beside the pool, and the start "
            f"needs {need:.2f} GiB there: it would die of CUDA out-of-memory; the highest fraction that starts "
            f"is {top}",
            f"upper edge: mem-fraction-static above {top}",
        )
    return None, None


def _num(value: Any) -> float | None:
    return None if value is None else float(value)


def _derive_before_plan(cand: Candidate, space: TuneSpace) -> None:
    if "speculative-num-draft-tokens" in space.derived:
        steps = cand.args.get("speculative-num-steps")
        if isinstance(steps, int) and steps > 0:
            _set(cand, "speculative-num-draft-tokens", steps + 1)


def _derive_after_plan(cand: Candidate, space: TuneSpace, running_limit: int | None) -> None:
    if "cuda-graph-max-bs" in space.derived and running_limit:
        _set(cand, "cuda-graph-max-bs", int(running_limit))


def _set(cand: Candidate, name: str, value: Any) -> None:
    if cand.args.get(name) == value:
        return
    cand.derived[name] = value
    cand.profile = with_args(cand.profile, {**cand.args, name: value})
