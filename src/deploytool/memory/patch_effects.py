"""What deploytool's SGLang patches change in the memory accounting, as the series declares it.

Each patch series (images/sglang/patches/<version>/) carries `memory.yaml` beside `series`: one
entry per patch, naming the effects the planner knows (EFFECTS) and, where a patch only acts
when a launch turns it on, the environment variable or flag that does. A patch with
`effects: []` leaves SGLang's pools alone on purpose, and says why. The planner refuses a series
with a patch that `memory.yaml` does not declare: a patch it knows nothing about could change
the pools without the plan saying so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import DeploytoolError, ProfileError
from ..yamlio import load_yaml
from .startup import ENV_TRUE

MEMORY_FILE = "memory.yaml"

EFFECTS = {
    "draft_shares_target_vocab": "the MTP draft takes the target's embedding and head before the KV pool is "
    "sized: its private bf16 copies are not counted",
    "draft_layers_fp8": "the MTP draft's bf16 layers are quantized to FP8 at load",
}


@dataclass(frozen=True)
class PatchMemory:
    """One patch's declared memory effects."""

    patch: str
    effects: tuple[str, ...]
    why: str
    # the launch setting that turns the effect on: {"env": NAME} or {"arg": FLAG}, with "equals"
    when: dict[str, str] = field(default_factory=dict)
    # launches the patched code never runs for (another draft worker), each like `when`
    not_with: tuple[dict[str, str], ...] = ()
    # where the effect was held to a real server (`real_card`, empty: nowhere yet) and the
    # figure the source measured with it (`source`: card, tokens, requests, launch)
    calibration: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def uncalibrated(self, card: str, pool_tokens: int, running: int) -> str | None:
        """The plan's line for an effect no real card has held, with the source's figure beside
        this plan's when the plan is for the source's card; None once calibrated."""
        if not self.effects or self.calibration.get("real_card"):
            return None
        line = f"{self.patch}: its effect ({', '.join(self.effects)}) has not been measured on a real card"
        source = self.calibration.get("source") or {}
        if source.get("card") == card:
            line += (
                f"; the source measured {int(source['tokens']):,} tokens and {source['requests']} running requests "
                f"on {card} for {source.get('launch', 'its launch')}, this plan says {pool_tokens:,} and {running}"
            )
        return line

    def active(self, args: dict[str, Any], env: dict[str, Any]) -> bool:
        if any(_holds(c, args, env) for c in self.not_with):
            return False
        return not self.when or _holds(self.when, args, env)

    def condition(self) -> str:
        parts = []
        if self.when:
            parts.append(f"with {_describe(self.when)}")
        if self.not_with:
            parts.append("not with " + " or ".join(_describe(c) for c in self.not_with))
        return f" ({'; '.join(parts)})" if parts else ""


def _holds(condition: dict[str, str], args: dict[str, Any], env: dict[str, Any]) -> bool:
    """An environment switch is read as SGLang reads its own (environ.py EnvBool: true, 1, yes, y,
    any case) when `equals` is a truth value; a flag without `equals` holds when it is given
    (not false or null); else the value compares as text (case-insensitive for a flag)."""
    expected = condition.get("equals")
    if "env" in condition:
        value = env.get(condition["env"])
        if expected is None or str(expected).strip().lower() in ENV_TRUE:
            return str(value or "").strip().lower() in ENV_TRUE
        return str(value if value is not None else "") == str(expected)
    value = args.get(condition["arg"])
    if expected is None:
        return value not in (None, False)
    return str(value if value is not None else "").lower() == str(expected).lower()


def _describe(condition: dict[str, str]) -> str:
    where = f"env {condition['env']}" if "env" in condition else f"--{condition['arg']}"
    return where + (f"={condition['equals']}" if "equals" in condition else "")


def read_memory_effects(folder: Path, names: list[str]) -> list[PatchMemory]:
    """The declared effects of `names` (in series order) from `folder`/memory.yaml; an error
    names the file and the line of the entry that is wrong."""
    path = folder / MEMORY_FILE
    if not names:
        return []
    if not path.is_file():
        raise ProfileError(
            f"{path}: missing; the planner needs each patch's memory effects",
            hint=f"add {MEMORY_FILE} beside `series` with an entry per patch "
            "(`effects: []` for a patch that leaves the pools alone)",
        )
    try:
        doc = load_yaml(path)
    except DeploytoolError as exc:  # malformed YAML, with its line
        raise ProfileError(exc.message) from None
    data = doc.data or {}
    declared = data.get("patches") if isinstance(data, dict) else None
    if not isinstance(declared, dict):
        raise ProfileError(
            f"{doc.where(('patches',))}: expected a mapping `patches:` of patch file name -> {{effects, why}}"
        )
    out = []
    for name in names:
        entry = declared.get(name)
        at = ("patches", name)
        if not isinstance(entry, dict):
            raise ProfileError(
                f"{doc.where(at)}: patch {name} is in the series but its memory effects are not declared",
                hint="add an entry under `patches:` (`effects: []` and a `why` when it leaves the pools alone)",
            )
        effects = entry.get("effects") or []
        unknown = [e for e in effects if e not in EFFECTS]
        if unknown:
            raise ProfileError(
                f"{doc.where((*at, 'effects'))}: patch {name}: unknown effect(s) "
                f"{', '.join(map(str, unknown))}",
                hint=f"the planner knows: {', '.join(sorted(EFFECTS))}",
            )
        when = entry.get("when") or {}
        not_with = entry.get("not_with") or []
        for key, conditions in (("when", [when] if when else []), ("not_with", not_with)):
            if not isinstance(conditions, list) or not all(
                isinstance(c, dict) and ("env" in c) != ("arg" in c) for c in conditions
            ):
                raise ProfileError(
                    f"{doc.where((*at, key))}: patch {name}: `{key}` names one `env` or one `arg` "
                    "(and `equals`)" + (", in a list" if key == "not_with" else "")
                )
        why = str(entry.get("why") or "").strip()
        if not why:
            raise ProfileError(
                f"{doc.where((*at, 'why'))}: patch {name}: `why` is empty",
                hint="say what the patch changes in memory, or why it changes nothing in the pools",
            )
        out.append(
            PatchMemory(
                patch=name,
                effects=tuple(effects),
                why=why,
                when={k: str(v) for k, v in when.items()},
                not_with=tuple({k: str(v) for k, v in c.items()} for c in not_with),
                calibration=dict(entry.get("calibration") or {}),
            )
        )
    return out
