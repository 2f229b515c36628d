"""What a bench run produces, as typed objects; results.json is `BenchRun` serialised
(schema in docs/bench.md) and `load_run` reads one back for `compare` and the qualify gate."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from ..errors import UsageError

SCHEMA = "deploytool.bench/1"


@dataclass
class RequestRecord:
    """One request's raw timings. Times are seconds since the run's start (perf_counter based);
    `chunk_offsets` are each token-bearing chunk's arrival, in seconds after `start`."""

    phase: str  # warmup | decode | load | prefill | sweep
    group: str  # e.g. decode_c1, load_c8, prefill_30000, sweep_c4
    concurrency: int
    index: int
    ok: bool
    error: str | None
    status: int | None
    prompt_prefix: str
    prompt_tokens_estimated: int
    prompt_tokens: int | None  # server's usage.prompt_tokens
    cached_tokens: int | None  # server's usage.prompt_tokens_details.cached_tokens
    max_tokens: int
    output_tokens: int | None  # server's usage.completion_tokens, else token chunks counted
    output_tokens_source: Literal["usage", "chunks"] | None
    reasoning_tokens: int | None
    answer_tokens: int | None
    finish_reason: str | None
    start: float
    first_token: float | None
    first_answer: float | None
    last_token: float | None
    end: float
    chunk_offsets: list[float] = field(default_factory=list)
    # True when the run's own deadline shortened this request's timeout and it timed out: the
    # run's time bound cut it, not a server fault (left out of errors_total and group figures).
    cut_by_time_bound: bool = False
    repeat: int = 0  # which pass of the method (0-based; method.repeats passes)
    conversation: int | None = None  # multi-turn workloads: the conversation and its turn (0-based)
    turn: int | None = None
    scheduled: float | None = None  # open-loop workloads: when the arrival process said to send it


@dataclass
class GroupSummary:
    """The medians of one group of requests (one phase at one concurrency or prompt length)."""

    name: str
    phase: str
    concurrency: int
    requests: int
    completed: int
    failed: int
    errors: dict[str, int]
    window_s: float
    aggregate_output_tps: float | None
    decode_tps_median: float | None
    decode_tps_p10: float | None
    decode_tps_p90: float | None
    ttft_median_s: float | None
    ttft_p90_s: float | None
    ttfa_median_s: float | None
    prefill_tps_median: float | None
    prompt_tokens_median: float | None
    output_tokens_median: float | None
    reasoning_tokens_median: float | None
    answer_tokens_median: float | None
    cached_tokens_max: int | None
    repeat: int = 0
    # inter-token latency over every gap between token chunks of the group, and time per output token
    itl_p50_s: float | None = None
    itl_p95_s: float | None = None
    itl_p99_s: float | None = None
    itl_max_s: float | None = None
    tpot_median_s: float | None = None
    # the server before and during the phase (docs/bench.md, "Measuring an idle server")
    idle_wait: dict[str, Any] | None = None  # {idle, waited_s, running, queued} before the phase
    server_requests: float | None = None  # sglang:num_requests_total delta over the phase
    server_running_peak: float | None = None  # sglang:num_running_reqs, highest sample in the phase
    server_cached_share: float | None = None  # cached / prompt tokens (server counters) over the phase
    server_window: dict[str, Any] | None = None  # the phase's /metrics counter window (metrics_window.Window)
    contaminated: bool = False  # the server did more than this phase sent: not comparable
    attempts: int = 1  # >1 when a contaminated attempt was thrown away and the phase re-run


# Which way a figure improves: "neither" for one that describes (a server counter's reading).
Better = Literal["higher", "lower", "neither"]


@dataclass
class Figure:
    """One headline number: what compare puts side by side and qualify gates on."""

    key: str
    label: str
    value: float | None
    unit: str
    better: Better
    completed: int
    failed: int
    # One list per repeat of the per-request values the figure is the median of (one value per
    # repeat for aggregates): what compare's intervals and the regression rule resample.
    samples: list[list[float]] = field(default_factory=list)
    repeat_values: list[float | None] = field(default_factory=list)  # the figure in each repeat
    spread: list[float] | None = None  # [min, max] of repeat_values


@dataclass
class SweepPoint:
    concurrency: int
    per_user_tps: float | None  # median per-request decode tok/s
    per_gpu_tps: float | None  # aggregate output tok/s / GPUs serving
    ttft_median_s: float | None
    completed: int
    failed: int
    on_front: bool = False
    curve: str = ""  # which curve of the run it belongs to (the workload's sweep), for overlays


@dataclass
class CacheCheck:
    """Did a prefix cache help? `reported` is False when the server never said."""

    reported: bool
    requests: int
    requests_with_hits: int
    max_cached_fraction: float | None
    allowed_fraction: float
    ok: bool
    message: str
    # Cached tokens always tolerated, whatever the fraction: a chat template's shared opening.
    allowed_tokens: int = 0
    # Where the figure came from: "usage" (per-request cached_tokens, --enable-cache-report),
    # "metrics" (counter differences over the measured phases) or "none" (not measured: fails).
    source: str = "usage"


@dataclass
class BenchRun:
    schema: str
    run_id: str
    started_at: str  # UTC, ISO 8601
    duration_s: float
    complete: bool  # False when the run's time bound cut it short
    method: dict[str, Any]
    method_fingerprint: str
    environment: dict[str, Any]
    server: dict[str, Any]  # /server_info, /v1/models, /metrics before and after
    groups: list[GroupSummary]
    figures: list[Figure]
    sweep: list[SweepPoint]
    cache_check: CacheCheck
    prompts_unique: bool
    errors_total: int
    requests_total: int
    notes: list[str]
    requests: list[RequestRecord]
    workload: str = "table"
    invalid_groups: list[str] = field(default_factory=list)  # contaminated even after a re-run
    details: dict[str, Any] = field(default_factory=dict)  # workload-specific tables (TTFT per turn, ...)
    source: str = ""  # where it was read from (compare); not written
    # decode's bandwidth-bound ceiling and the measured share (bench/roofline.py); None: see notes
    roofline: dict[str, Any] | None = None

    @property
    def simulator(self) -> bool:
        """Measured against deploytool's reference runtime (a simulator, not a model)."""
        info = self.server.get("server_info") or {}
        release = self.environment.get("release") or {}
        return bool(info.get("simulator") or release.get("simulator"))

    def figure(self, key: str) -> Figure | None:
        return next((f for f in self.figures if f.key == key), None)

    def group(self, name: str) -> GroupSummary | None:
        return next((g for g in self.groups if g.name == name), None)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("source")
        return data


def run_from_json(data: dict[str, Any], source: str = "") -> BenchRun:
    """A BenchRun from its results.json contents; refuses another schema with a clear error."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise UsageError(
            f"{source or 'input'} is not a deploytool bench results.json "
            f"(expected schema {SCHEMA!r}, got {data.get('schema') if isinstance(data, dict) else None!r})"
        )
    body = dict(data)
    body["groups"] = [_build(GroupSummary, g) for g in data.get("groups", [])]
    body["figures"] = [_build(Figure, f) for f in data.get("figures", [])]
    body["sweep"] = [_build(SweepPoint, p) for p in data.get("sweep", [])]
    body["cache_check"] = _build(CacheCheck, data["cache_check"])
    body["requests"] = [_build(RequestRecord, r) for r in data.get("requests", [])]
    body["source"] = source
    return _build(BenchRun, body)


def _build(cls: type, data: dict[str, Any]) -> Any:
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


def load_run(path: Path) -> BenchRun:
    """A results.json, or a report folder holding one."""
    file = path / "results.json" if path.is_dir() else path
    if not file.is_file():
        raise UsageError(
            f"no bench results at {path}",
            hint="give a results.json or the folder `deploytool bench --report DIR` wrote",
        )
    try:
        data = json.loads(file.read_text())
    except json.JSONDecodeError as exc:
        raise UsageError(f"{file} is not valid JSON: {exc}") from None
    return run_from_json(data, source=str(file))
