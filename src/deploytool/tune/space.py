"""What `tune` searches: the launch flags and their values, the load each live server is
measured at, the latency targets; and the candidates (the profile's own launch first).

The space comes from the profile's `tune:` section, or a `--space FILE` of the same keys; a
section that names no flags gets the recipe's defaults (SGLang's knobs that decide throughput,
around the profile's own values). Knobs SGLang couples to another (the CUDA-graph batch limit
follows the running limit) are `derived` from the candidate's plan, not searched blindly.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..errors import FieldError, ProfileError, UsageError
from ..profiles import Profile
from ..profiles.rules import flag_problems

# What a derived knob follows: the plan's running limit (SGLang captures graphs up to the batch
# it can run; a larger limit only costs memory) or the draft steps + 1 (a chain's draft tokens).
DERIVED = {"cuda-graph-max-bs": "running_limit", "speculative-num-draft-tokens": "steps_plus_one"}
SLO_KEYS = ("ttft_p99_ms", "tpot_p99_ms", "min_user_tps")


class Slo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ttft_p99_ms: float | None = Field(default=None, gt=0)
    tpot_p99_ms: float | None = Field(default=None, gt=0)
    min_user_tps: float | None = Field(default=None, gt=0)

    def describe(self) -> str:
        parts = [f"{k}={v:g}" for k, v in self.model_dump().items() if v is not None]
        return ", ".join(parts) or "none"


class TuneSpace(BaseModel):
    """The `tune:` section (and a --space file)."""

    model_config = ConfigDict(extra="forbid")
    flags: dict[str, list[Any]] = Field(default_factory=dict)
    derived: list[str] = Field(default_factory=list)
    load: list[int] = Field(default_factory=lambda: [1, 8, 32])
    requests_per_level: int = Field(default=2, ge=1)
    prompt_tokens: int = Field(default=128, ge=16)
    output_tokens: int = Field(default=256, ge=2)
    repeats: int = Field(default=2, ge=1)  # measured passes per server start
    rounds: int = Field(default=3, ge=1)  # server starts a candidate at most
    max_passes: int = Field(default=6, ge=1)  # passes on one live server at most, while it races
    min_starts: int = Field(default=2, ge=1)  # starts the winner needs (restart-to-restart noise)
    confidence: float = Field(default=0.95, gt=0.5, lt=1)  # of every interval (tune/estimate.py)
    start_noise: float = Field(default=0.03, ge=0, lt=1)  # restart noise assumed before one is measured
    # how far a measurement may beat the calibrated prediction; null: start every candidate
    predict_slack: float | None = Field(default=0.3, ge=0)
    max_candidates: int = Field(default=64, ge=1)
    tie_margin: float = Field(default=0.02, ge=0, lt=1)  # means closer than this share are equal
    slo: Slo = Field(default_factory=Slo)
    # How each live server is loaded: `table` sweeps `load` (closed loop); agentic, long-context
    # and open-loop are bench's workloads with their own settings (bench/workloads/), which
    # `workload_settings` overrides (agentic's concurrency defaults to `load`)
    workload: str = "table"
    workload_settings: dict[str, Any] = Field(default_factory=dict)
    qualify: list[str] = Field(default_factory=lambda: ["preflight", "contract"])  # suites run on the winner

    @field_validator("flags")
    @classmethod
    def _values(cls, value: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for name, values in value.items():
            if not isinstance(values, list) or not values:
                raise ValueError(f"{name}: expected a non-empty list of values")
        return {k.lstrip("-"): v for k, v in value.items()}

    @field_validator("load")
    @classmethod
    def _load(cls, value: list[int]) -> list[int]:
        if not value or any(c < 1 for c in value):
            raise ValueError("expected concurrency levels >= 1")
        return sorted(set(value))

    @field_validator("derived")
    @classmethod
    def _derived(cls, value: list[str]) -> list[str]:
        for name in value:
            if name.lstrip("-") not in DERIVED:
                raise ValueError(f"{name}: deploytool derives only {', '.join(DERIVED)}")
        return [v.lstrip("-") for v in value]


@dataclass
class Candidate:
    """One launch: the flags that differ from the profile's (`changes`) and the profile it makes."""

    id: str
    changes: dict[str, Any]
    profile: Profile
    derived: dict[str, Any] = field(default_factory=dict)

    @property
    def args(self) -> dict[str, Any]:
        return dict(self.profile.server.args)

    def label(self) -> str:
        shown = {**self.changes, **self.derived}
        return ", ".join(f"{k}={v}" for k, v in shown.items()) or "the profile's own launch"


def recipe_defaults(profile: Profile) -> tuple[dict[str, list[Any]], list[str]]:
    """SGLang's knobs that decide throughput, around the profile's own values."""
    if profile.image.recipe != "sglang":
        return {}, []
    args = profile.server.args
    flags: dict[str, list[Any]] = {}
    mfs = args.get("mem-fraction-static")
    if isinstance(mfs, (int, float)):
        flags["mem-fraction-static"] = sorted(
            {round(min(0.95, max(0.5, mfs + d)), 2) for d in (-0.04, 0.0, 0.03)}
        )
    mrr = args.get("max-running-requests")
    base = int(mrr) if isinstance(mrr, int) else 32
    flags["max-running-requests"] = sorted({max(1, base // 2), base, base * 2})
    if args.get("speculative-algorithm"):
        flags["speculative-num-steps"] = [1, 2, 3]
        return flags, ["cuda-graph-max-bs", "speculative-num-draft-tokens"]
    return flags, ["cuda-graph-max-bs"]


def read_space(profile: Profile, space_file: Path | None = None, *, workload: str | None = None) -> TuneSpace:
    """The profile's `tune:` section, or the file's; the recipe's defaults when it names no flags.
    `workload` (the --workload flag) overrides the space's own."""
    if space_file is not None:
        from ..yamlio import load_yaml

        raw = load_yaml(Path(space_file)).data
        where = f"--space {space_file}"
    else:
        raw, where = profile.tune, f"profile {profile.name}: tune"
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}: expected a mapping (flags, load, slo, ...)")
    try:
        space = TuneSpace.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'tune'}: "
            + ("unknown key" if e["type"] == "extra_forbidden" else e["msg"])
            for e in exc.errors()
        )
        raise ProfileError(
            f"{where}: {problems}", hint=f"known keys: {', '.join(TuneSpace.model_fields)} (docs/tune.md)"
        ) from None
    keyed = flag_problems(space.flags, ("flags",), searched=True)
    if keyed:  # a --space file meets the profile's key rule here
        loc, what = keyed[0]
        raise ProfileError(f"{where}: {'.'.join(loc)}: {what}")
    if workload is not None:
        space = space.model_copy(update={"workload": workload})
    check_workload(space, where)
    if not space.flags:
        flags, derived = recipe_defaults(profile)
        if not flags:
            raise UsageError(
                f"{where}: the space is empty: no flags to search",
                hint=f"recipe {profile.image.recipe!r} has no default knobs; name them under "
                "tune.flags, e.g. max-running-requests: [8, 16, 32]",
            )
        space = space.model_copy(update={"flags": flags, "derived": space.derived or derived})
    return space


TUNE_WORKLOADS = ("table", "agentic", "long-context", "open-loop")


def workload_settings(space: TuneSpace) -> dict[str, Any]:
    """The bench workload's settings for a tune pass: its defaults, then what the space implies
    (agentic's concurrency sweep is the space's `load`), then `workload_settings`."""
    from ..bench.workloads import resolve_settings

    implied = {"concurrency": space.load} if space.workload == "agentic" else {}
    return resolve_settings(space.workload, "default", {**implied, **space.workload_settings})


def check_workload(space: TuneSpace, where: str) -> None:
    """A workload tune cannot search, or settings the workload refuses, before anything starts."""
    if space.workload not in TUNE_WORKLOADS:
        raise UsageError(
            f"{where}: workload {space.workload!r} is not one tune searches with",
            hint=f"one of {', '.join(TUNE_WORKLOADS)} (input-ablation compares prompts, not launches)",
        )
    if space.workload == "table":
        if space.workload_settings:
            raise UsageError(
                f"{where}: workload_settings is for agentic, long-context and open-loop",
                hint="the table workload's sizes are load, requests_per_level, prompt_tokens, output_tokens",
            )
        return
    try:
        workload_settings(space)
    except ValueError as exc:
        raise UsageError(f"{where}: {exc}", hint="docs/bench.md lists each workload's settings") from None


def parse_slo(text: str | None) -> Slo:
    """--slo ttft_p99_ms=2000,tpot_p99_ms=50,min_user_tps=20 -> the targets given (None: not
    given, the space's own holds; see `slo_over`)."""
    values: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        key, sep, raw = part.partition("=")
        key = key.strip()
        if not sep or key not in SLO_KEYS:
            raise FieldError(
                "slo", f"expected KEY=NUMBER with KEY one of {', '.join(SLO_KEYS)}", value=repr(part)
            )
        try:
            values[key] = float(raw)
        except ValueError:
            raise FieldError("slo", f"{raw!r} is not a number", value=repr(part)) from None
        if values[key] <= 0:
            raise FieldError("slo", "expected a number > 0", value=repr(part))
    return Slo.model_validate(values)


def slo_over(space: TuneSpace, given: Slo) -> Slo:
    """The space's targets with the ones given for this search in their place."""
    values = space.slo.model_dump()
    values.update({k: v for k, v in given.model_dump().items() if v is not None})
    return Slo.model_validate(values)


def parse_budget(text: str | None) -> float | None:
    """--budget 90m / 2h / 600s / 600 -> seconds."""
    if not text:
        return None
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not match or float(match.group(1)) <= 0:
        raise FieldError("budget", "expected a duration such as 90m, 2h or 600s", value=repr(text))
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]


def candidates(profile: Profile, space: TuneSpace) -> list[Candidate]:
    """The profile's own launch ("base"), then every combination of the space's values that
    differs from it, in a stable order."""
    base_args = dict(profile.server.args)
    names = list(space.flags)
    out = [Candidate("base", {}, profile)]
    seen = {_key(base_args)}
    for values in itertools.product(*(space.flags[n] for n in names)):
        args = {**base_args, **dict(zip(names, values, strict=True))}
        key = _key(args)
        if key in seen:
            continue
        seen.add(key)
        changes = {n: v for n, v in zip(names, values, strict=True) if base_args.get(n) != v}
        out.append(Candidate(f"c{len(out):02d}", changes, with_args(profile, args)))
    if len(out) > space.max_candidates + 1:
        raise UsageError(
            f"the space makes {len(out) - 1} candidates, more than max_candidates ({space.max_candidates})",
            hint="narrow tune.flags, or raise tune.max_candidates",
        )
    return out


def with_args(profile: Profile, args: dict[str, Any]) -> Profile:
    """The profile launched with `args`; preflight expectations that restate a launch flag follow
    the new launch (see `followed_expectations`)."""
    server = profile.server.model_copy(update={"args": args})
    update: dict[str, Any] = {"server": server}
    followed = followed_expectations(profile, args)
    if followed:
        preflight = dict(profile.qualify.get("preflight") or {})
        preflight["expect"] = {**(preflight.get("expect") or {}), **followed}
        update["qualify"] = {**profile.qualify, "preflight": preflight}
    return profile.model_copy(update=update)


def followed_expectations(profile: Profile, args: dict[str, Any]) -> dict[str, Any]:
    """The preflight expectations that only restate a launch flag, as `args` would set them,
    where they differ from the profile's. A profile that pins decode graphs off (to start
    faster) would otherwise refuse every candidate that turns them on, for words the search
    itself made stale; expectations that are requirements (the KV pool, the accept length) stay."""
    expect = (profile.qualify.get("preflight") or {}).get("expect") or {}
    out: dict[str, Any] = {}
    if expect.get("decode_cuda_graph") is not None:
        # a flag is set only as args_to_argv renders it: True, a bare flag
        on = not any(args.get(k) is True for k in ("disable-cuda-graph", "disable-decode-cuda-graph"))
        if on != expect["decode_cuda_graph"]:
            out["decode_cuda_graph"] = on
    for key, flag in (
        ("speculative_algorithm", "speculative-algorithm"),
        ("moe_runner_backend", "moe-runner-backend"),
    ):
        if (
            expect.get(key) is not None
            and args.get(flag) is not None
            and args[flag] != expect[key]
            and args[flag] != profile.server.args.get(flag)
        ):
            out[key] = args[flag]
    return out


def _key(args: dict[str, Any]) -> str:
    return repr(sorted((k, repr(v)) for k, v in args.items()))
