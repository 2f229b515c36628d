"""The benchmark method: every setting that shapes a figure, recorded in each run's results.

Two runs are comparable only when their methods agree (`BenchMethod.comparable_dict`); `compare`
refuses or flags runs whose methods differ rather than put unlike numbers side by side.

Where the settings come from, later wins: the preset (`default` or `quick`), the profile's
`bench:` section (its `quick:` sub-section on quick runs), then the command line's flags
(presets.py puts them together and resolves the workload's own settings).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

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
    def _check_lists(self) -> BenchMethod:
        if any(c < 1 for c in self.load_concurrency):
            raise ValueError("load_concurrency values must be >= 1")
        if any(n < 16 for n in self.prefill_prompt_tokens):
            raise ValueError("prefill_prompt_tokens values must be >= 16")
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
        for key in (
            "request_timeout_s",
            "run_timeout_s",
            "seed",
            "metrics_interval_s",
            "idle_timeout_s",
            "repeats",
            "rerun_contaminated",
        ):
            data.pop(key)
        data["temperature"] = self.sampling_temperature
        return data

    def fingerprint(self) -> str:
        text = json.dumps(self.comparable_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]
