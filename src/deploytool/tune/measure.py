"""The load sweep on one live server: bench's runner, at each concurrency level of the space,
`repeats` passes, every request's timings kept; then each pass's points (throughput per GPU,
per-user tok/s, TTFT and TPOT p50/p99, the share of requests inside the SLO) and its score."""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, field
from typing import Any

from ..bench import stats
from ..bench.presets import build_method
from ..bench.results import BenchRun, RequestRecord
from ..bench.runner import BenchRunner
from ..checks.targets import Target
from ..profiles import Profile
from ..server import serverfields
from .space import Slo, TuneSpace, workload_settings


@dataclass
class LoadPoint:
    concurrency: int
    per_gpu_tps: float | None  # aggregate output tok/s / GPUs
    per_user_tps: float | None  # median per-request decode tok/s
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    tpot_p99_ms: float | None
    completed: int
    failed: int
    goodput: float  # share of the level's requests inside the SLO, each judged alone
    slo_excess: float  # worst ratio of a point figure to its target (<= 1: the point meets the SLO)

    @property
    def meets(self) -> bool:
        return self.failed == 0 and self.per_gpu_tps is not None and self.slo_excess <= 1.0


@dataclass
class Pass:
    """One measured pass of one candidate on one of its server starts."""

    candidate: str
    visit: int  # which start of this candidate (0-based)
    repeat: int
    points: list[LoadPoint]
    score: float | None  # the best per-GPU tok/s among the points inside the SLO; None: none is
    # what the server said: kv_tokens, running_limit, runtime_version
    reported: dict[str, Any] = field(default_factory=dict)
    startup_s: float = 0.0  # the start that served this pass (counted once per visit in totals)
    measure_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Pass:
        points = [LoadPoint(**p) for p in data.get("points", [])]
        return cls(**{**data, "points": points})


def tune_method(space: TuneSpace, run_timeout_s: float, *, warm: bool = False) -> Any:
    """bench's method for a tune pass: one warm-up, a one-request decode check, then the load
    levels of the space (no prefill phase: the search is about serving throughput); or one of
    bench's workloads with its settings. `warm`: the server already served this visit's passes,
    so the warm-up is left out (it would only repeat what they did)."""
    passes: dict[str, Any] = {
        "repeats": space.repeats,
        "warmup_requests": 0 if warm else 1,
        "warmup_output_tokens": 16,
        "idle_timeout_s": 30.0,
        "run_timeout_s": run_timeout_s,
        "request_timeout_s": min(600.0, run_timeout_s),
    }
    if space.workload != "table":
        return build_method(
            **passes, workload=space.workload, workload_settings={space.workload: workload_settings(space)}
        )
    return build_method(
        **passes,
        decode_requests=1,
        decode_output_tokens=16,
        decode_prompt_tokens=space.prompt_tokens,
        load_concurrency=space.load,
        load_requests_per_slot=space.requests_per_level,
        load_output_tokens=space.output_tokens,
        prefill_prompt_tokens=[],
        sweep=False,
    )


def measure(
    url: str,
    profile: Profile,
    space: TuneSpace,
    slo: Slo,
    *,
    candidate: str,
    visit: int,
    run_timeout_s: float = 1800.0,
    warm: bool = False,
) -> tuple[list[Pass], BenchRun]:
    """The sweep on the server at `url`; one Pass per repeat. A keyed profile's key goes with
    every request (a candidate serves with the profile's key). `warm`: see tune_method."""
    target = Target(url=url, profile=profile, api_key=profile_key(profile))
    method = tune_method(space, run_timeout_s, warm=warm)
    run = run_interruptible(BenchRunner(target, method, progress=False).run())
    return passes_of(run, slo, candidate=candidate, visit=visit, gpus=_gpus(profile)), run


def run_interruptible(coro: Any) -> Any:
    """asyncio.run, but a Ctrl-C or SIGTERM during it always ends it with KeyboardInterrupt.

    asyncio.run turns Ctrl-C into a cancellation of its task and raises KeyboardInterrupt only
    if that cancellation comes back out; a request path that absorbs a CancelledError (a
    gather of requests, a client's clean-up) lets the run finish normally and the Ctrl-C is
    lost: the search ran on. Here the signal is noted first (the handler that was there still
    runs: SIGTERM's raises), Ctrl-C raises at once, and a run that ends after a signal raises."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return asyncio.run(coro)
    seen: list[int] = []
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def note(signum: int, frame: Any) -> None:
        seen.append(signum)
        handler = before[signal.Signals(signum)]
        if callable(handler):
            handler(signum, frame)
        raise KeyboardInterrupt()

    for sig in before:
        if before[sig] is not signal.SIG_IGN:
            signal.signal(sig, note)
    try:
        result = asyncio.run(coro)
    finally:
        for sig, handler in before.items():
            if signal.getsignal(sig) is note:
                signal.signal(sig, handler)
    if seen:
        raise KeyboardInterrupt()
    return result


def profile_key(profile: Profile) -> str | None:
    key = profile.server.api_key
    return key.resolve(what=f"server.api_key of profile {profile.name}") if key is not None else None


def passes_of(run: BenchRun, slo: Slo, *, candidate: str, visit: int, gpus: int) -> list[Pass]:
    info = run.server.get("server_info") or {}
    reported = {
        "kv_tokens": serverfields.kv_pool_tokens(info),
        "running_limit": serverfields.running_limit(info)[0],
        "runtime_version": serverfields.runtime_version(info),
    }
    out = []
    # table's decode check is not a load level; every group of another workload is one
    levels = [g for g in run.groups if g.phase == "load" or run.workload != "table"]
    repeats = sorted({g.repeat for g in levels})
    for repeat in repeats:
        points = []
        for group in sorted((g for g in levels if g.repeat == repeat), key=lambda g: g.concurrency):
            records = [
                r
                for r in run.requests
                if r.group == group.name and r.repeat == repeat and not r.cut_by_time_bound
            ]
            points.append(load_point(group.concurrency, group.aggregate_output_tps, records, slo, gpus))
        inside = [p.per_gpu_tps for p in points if p.meets and p.per_gpu_tps is not None]
        out.append(
            Pass(
                candidate=candidate,
                visit=visit,
                repeat=repeat,
                points=points,
                score=max(inside) if inside else None,
                reported=reported,
                measure_s=round(run.duration_s / max(1, len(repeats)), 3),
            )
        )
    return out


def load_point(
    concurrency: int, aggregate_tps: float | None, records: list[RequestRecord], slo: Slo, gpus: int
) -> LoadPoint:
    done = [r for r in records if r.ok]
    ttfts = [_ms(stats.ttft(r)) for r in done]
    tpots = [_ms(stats.tpot(r)) for r in done]
    users = [stats.decode_tps(r) for r in done]
    good = sum(1 for t, p, u in zip(ttfts, tpots, users, strict=True) if _inside(slo, t, p, u))
    point = LoadPoint(
        concurrency=concurrency,
        per_gpu_tps=None if aggregate_tps is None else round(aggregate_tps / gpus, 3),
        per_user_tps=_r(stats.median(users)),
        ttft_p50_ms=_r(stats.percentile(ttfts, 50)),
        ttft_p99_ms=_r(stats.percentile(ttfts, 99)),
        tpot_p50_ms=_r(stats.percentile(tpots, 50)),
        tpot_p99_ms=_r(stats.percentile(tpots, 99)),
        completed=len(done),
        failed=len(records) - len(done),
        goodput=round(good / len(records), 4) if records else 0.0,
        slo_excess=0.0,
    )
    point.slo_excess = round(excess(slo, point.ttft_p99_ms, point.tpot_p99_ms, point.per_user_tps), 4)
    return point


def excess(slo: Slo, ttft_ms: float | None, tpot_ms: float | None, user_tps: float | None) -> float:
    """The worst ratio of a figure to its target, oriented so that above 1 misses it."""
    ratios = [0.0]
    for value, limit in ((ttft_ms, slo.ttft_p99_ms), (tpot_ms, slo.tpot_p99_ms)):
        if limit is not None:
            ratios.append(float("inf") if value is None else value / limit)
    if slo.min_user_tps is not None:
        ratios.append(float("inf") if not user_tps else slo.min_user_tps / user_tps)
    return max(ratios)


def _inside(slo: Slo, ttft: float | None, tpot: float | None, user: float | None) -> bool:
    return excess(slo, ttft, tpot, user) <= 1.0


def _gpus(profile: Profile) -> int:
    return 1 if profile.is_simulator else max(1, profile.match.gpu_count)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
