"""The benchmark method: every setting that shapes a figure, recorded in each run's results.

Two runs are comparable only when their methods agree (`BenchMethod.comparable_dict`); `compare`
refuses or flags runs whose methods differ rather than put unlike numbers side by side.

Where the settings come from, later wins: the preset (`default` or `quick`), the profile's
`bench:` section (its `quick:` sub-section on quick runs), then the command line's flags.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import ProfileError

METHOD_VERSION = 2  # bumped when a formula changes, so old and new runs are never mixed silently


class BenchMethod(BaseModel):
    """The method settings. Defaults are the published method (docs/bench.md)."""

    model_config = ConfigDict(extra="forbid")

    preset: Literal["default", "quick"] = "default"
    method_version: int = METHOD_VERSION
    # Which named workload runs (bench/workloads/): "table" is the source's table (the settings
    # below); the others take their settings from workload_settings[<name>] over their defaults.
    workload: str = "table"
    workload_settings: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # Passes of the whole workload; every figure is the median over passes, with its spread.
    repeats: int = Field(default=3, ge=1)
    # Before each measured phase: wait up to this long for /metrics to show no running and no
    # queued request; a phase during which the server finished more requests than it sent is
    # re-run once (rerun_contaminated) and otherwise reported invalid.
    idle_timeout_s: float = Field(default=120.0, ge=0)
    rerun_contaminated: bool = True
    # Warm-up: requests sent first and left out of every figure (cold kernels, graph capture).
    warmup_requests: int = Field(default=2, ge=0)
    warmup_output_tokens: int = Field(default=64, ge=1)
    # Decode, one request at a time.
    decode_requests: int = Field(default=8, ge=1)
    decode_output_tokens: int = Field(default=1000, ge=2)
    decode_prompt_tokens: int = Field(default=128, ge=16)
    # Decode under load: `load_requests_per_slot` x concurrency requests at each concurrency.
    load_concurrency: list[int] = Field(default_factory=lambda: [4, 8])
    load_requests_per_slot: int = Field(default=4, ge=1)
    load_output_tokens: int = Field(default=1000, ge=2)
    # Prefill: distinct prompts of each length (capped by the server's context), few output tokens.
    prefill_prompt_tokens: list[int] = Field(default_factory=lambda: [30_000, 120_000, 225_000])
    prefill_prompts_each: int = Field(default=3, ge=1)
    prefill_output_tokens: int = Field(default=4, ge=1)
    # Concurrency sweep (--sweep): 1, 2, 4, ... up to the server's max running requests.
    sweep: bool = False
    sweep_max_concurrency: int = Field(default=256, ge=1)
    sweep_requests_per_slot: int = Field(default=2, ge=1)
    sweep_output_tokens: int = Field(default=256, ge=2)
    # Sampling: thinking off is greedy; thinking on samples at 0.7 and keeps the model's defaults.
    thinking: bool = False
    temperature: float | None = None  # None: 0.0 with thinking off, 0.7 with it on
    # Cache check: a request whose cached prompt tokens exceed this fraction of its prompt counts
    # as a cache hit, and the run says the prefix cache helped.
    max_cached_fraction: float = Field(default=0.02, ge=0, le=1)
    # Bounds, so nothing hangs: one request, and the whole run.
    request_timeout_s: float = Field(default=600.0, gt=0)
    run_timeout_s: float = Field(default=3600.0, gt=0)
    seed: int | None = None  # random prefixes; None: a fresh seed each run (recorded)
    # How often /metrics is read during measured phases (peak KV token usage, running requests).
    metrics_interval_s: float = Field(default=1.0, gt=0)

    @model_validator(mode="after")
    def _check_lists(self) -> "BenchMethod":
        if any(c < 1 for c in self.load_concurrency):
            raise ValueError("load_concurrency values must be >= 1")
        if any(n < 16 for n in self.prefill_prompt_tokens):
            raise ValueError("prefill_prompt_tokens values must be >= 16")
        from .workloads import resolve_settings

        # The chosen workload's settings, resolved (defaults, the quick sizes on quick runs, then
        # what was given) and recorded whole, so results say exactly what ran.
        self.workload_settings = {self.workload: resolve_settings(self.workload, self.preset,
                                                                  self.workload_settings.get(self.workload))}
        return self

    @property
    def sampling_temperature(self) -> float:
        if self.temperature is not None:
            return self.temperature
        return 0.7 if self.thinking else 0.0

    def comparable_dict(self) -> dict[str, Any]:
        """The settings that change a figure: all but the time bounds, the seed and sampling."""
        data = self.model_dump(mode="json")
        # repeats and the noise handling change how sure a figure is, not what it measures
        for key in ("request_timeout_s", "run_timeout_s", "seed", "metrics_interval_s", "idle_timeout_s",
                    "repeats", "rerun_contaminated"):
            data.pop(key)
        data["temperature"] = self.sampling_temperature
        return data

    def fingerprint(self) -> str:
        text = json.dumps(self.comparable_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


QUICK_PRESET: dict[str, Any] = {
    "preset": "quick",
    "warmup_requests": 1,
    "warmup_output_tokens": 16,
    "decode_requests": 3,
    "decode_output_tokens": 128,
    "load_concurrency": [4],
    "load_requests_per_slot": 2,
    "load_output_tokens": 128,
    "prefill_prompt_tokens": [4000],
    "prefill_prompts_each": 2,
    "sweep_max_concurrency": 8,
    "sweep_requests_per_slot": 1,
    "sweep_output_tokens": 64,
    "run_timeout_s": 600.0,
}


def build_method(*, quick: bool = False, profile_bench: dict[str, Any] | None = None,
                 thinking: bool | None = None, sweep: bool | None = None,
                 profile_name: str | None = None, **overrides: Any) -> BenchMethod:
    """The method for one run: preset, then the profile's `bench:` section, then the flags.

    An unknown or ill-typed key in the profile's `bench:` section is refused with its name and
    the known keys, so a typo never silently runs the default method."""
    settings: dict[str, Any] = dict(QUICK_PRESET) if quick else {}
    section = dict(profile_bench or {})
    quick_section = section.pop("quick", None) or {}
    if not isinstance(quick_section, dict):
        raise ProfileError(f"{_where(profile_name)}bench.quick must be a mapping of method settings")
    for key in ("preset", "method_version"):
        if key in section or key in quick_section:
            raise ProfileError(f"{_where(profile_name)}bench.{key} is set by deploytool, not by a profile")
    settings.update(section)
    if quick:
        settings.update(quick_section)
    if thinking is not None:
        settings["thinking"] = thinking
    if sweep is not None:
        settings["sweep"] = sweep
    settings.update(overrides)
    try:
        return BenchMethod.model_validate(settings)
    except ValidationError as exc:
        known = ", ".join(k for k in BenchMethod.model_fields if k not in ("preset", "method_version"))
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'bench'}: "
            + ("unknown setting" if err["type"] == "extra_forbidden" else err["msg"])
            for err in exc.errors()
        )
        raise ProfileError(f"{_where(profile_name)}bench method is not valid: {problems}",
                           hint=f"known settings: {known} (docs/bench.md)") from None


def _where(profile_name: str | None) -> str:
    return f"profile {profile_name!r}: " if profile_name else ""
