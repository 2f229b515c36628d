"""A person's what-ifs on a memory plan: launch flags given as `--set KEY=VALUE` and the image's
patches given as `--patches`, parsed and held to what the planner reads."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from typing import Any

import yaml

from ..errors import FieldError
from .patch_effects import PatchMemory
from .startup import FLAGS_READ

# The launch flags the planner reads (inputs_from_profile): a what-if on any other flag could
# not change the plan, so it is refused rather than echoed over an unchanged plan.
PLANNER_FLAGS = frozenset(
    {
        "context-length",
        "mem-fraction-static",
        "kv-cache-dtype",
        "max-running-requests",
        "tp-size",
        "tensor-parallel-size",
        "page-size",
        "speculative-algorithm",
        "speculative-num-draft-tokens",
        "mamba-ssm-dtype",
        "max-total-tokens",
        "max-mamba-cache-size",
        "mamba-full-memory-ratio",
        "disable-radix-cache",
        "disable-overlap-schedule",
        "mamba-radix-cache-strategy",
        "linear-attn-backend",
        "enable-linear-replayssm-spec",
        "linear-replayssm-cache-len",
        # what sizes the memory beside the pool, and the parallel sizes checked against the cards
        "chunked-prefill-size",
        "cuda-graph-max-bs",
        "disable-cuda-graph",
        "speculative-num-steps",
        "pp-size",
        "pipeline-parallel-size",
        "dp-size",
        "data-parallel-size",
        "ep-size",
        "expert-parallel-size",
        "enable-dp-attention",
    }
)


def check_sets(
    overrides: dict[str, Any], patches: Sequence[PatchMemory] = (), launch: Iterable[object] = ()
) -> None:
    """Refuse a what-if on a flag the plan does not read (a typo most often), with the close
    names; a flag a patch's effect is conditioned on counts as read, and so does one the
    profile's own launch sets (undoing or changing it is the launch the person asks about)."""
    known = (
        PLANNER_FLAGS
        | FLAGS_READ
        | {p.when["arg"] for p in patches if "arg" in p.when}
        | {str(k).lstrip("-") for k in launch}
    )
    unknown = [key for key in overrides if key not in known]
    if not unknown:
        return
    key = unknown[0]
    close = difflib.get_close_matches(key, sorted(known), n=3, cutoff=0.6)
    fix = (
        f"did you mean {' or '.join('--set ' + c + '=' for c in close)}?"
        if close
        else "the flags it reads: " + ", ".join(sorted(known))
    )
    raise FieldError(
        "sets",
        "the memory plan reads no such flag, so this what-if would change nothing"
        + (f" (also unknown: {', '.join(unknown[1:])})" if unknown[1:] else ""),
        value=key,
        hint=fix + "; `deploytool profiles check` checks a launch flag against SGLang's own parser",
    )


def parse_sets(pairs: list[str] | None) -> dict[str, Any]:
    """--set KEY=VALUE (SGLang's flag names, with or without the leading --): values are read
    as YAML scalars, so 0.90 is a number, true a flag and fp8_e4m3 text."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        key = key.strip().lstrip("-")
        if not sep or not key:
            raise FieldError(
                "sets", "expected KEY=VALUE, e.g. --set mem-fraction-static=0.90", value=repr(pair)
            )
        out[key.replace("_", "-")] = yaml.safe_load(value) if value.strip() else None
    return out


def parse_patches(value: str | None) -> list[str] | None:
    """--patches: None (the profile's own), `none`, `series` (the whole series file) or names."""
    if value is None:
        return None
    names = [n.strip() for n in value.split(",") if n.strip()]
    if names == ["none"]:
        return []
    if names == ["series"]:
        return None
    if not names or "none" in names or "series" in names:
        raise FieldError(
            "patches", "expected `none`, `series` or patch file names separated by commas", value=repr(value)
        )
    return names
