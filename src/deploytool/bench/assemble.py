"""From a finished runner to a `BenchRun`: figures merged over passes (median and spread), the
Pareto points, the cold-cache check and the run's counts (docs/bench.md, "The figures")."""

from __future__ import annotations

import time

from ..server import metrics_window as mw
from ..server import serverfields
from ..server.facts import server_side_figures
from . import stats
from .context import BenchContext
from .environment import describe_environment
from .figures import merge_passes
from .results import SCHEMA, BenchRun, Better, CacheCheck, Figure, GroupSummary, RequestRecord, SweepPoint

# Cached prompt tokens the cache check always tolerates besides max_cached_fraction: the chat
# template's opening (role markers, a system preamble) is the same in every prompt, and a
# per-token radix cache reuses it however unique the text after it is.
CACHED_TOKENS_ALLOWED = 16
SWEEP_PHASES = ("sweep", "agentic")


def assemble_run(runner: BenchContext) -> BenchRun:
    measured = [
        r for r in runner.records if r.phase not in ("warmup", "discarded") and not r.cut_by_time_bound
    ]
    prefixes = [r.prompt_prefix for r in runner.records if r.turn in (None, 0)]
    gpus = runner.gpus
    sweep = sweep_points(runner.groups, runner.records, gpus)
    cold, counted = _windows(runner)
    server_figures = server_side_figures(runner.after, runner.metric_peaks, mw.combine(counted))
    figures = merge_passes(runner.pass_figures)
    if sweep:
        best = max(
            (p for p in sweep if p.per_gpu_tps is not None), key=lambda p: p.per_gpu_tps or 0.0, default=None
        )
        if best is not None:
            figures.append(
                Figure(
                    "sweep_peak_per_gpu_tps",
                    f"sweep peak per GPU (at {best.concurrency} concurrent)",
                    best.per_gpu_tps,
                    "tok/s",
                    "higher",
                    best.completed,
                    best.failed,
                )
            )
    for key, value in server_figures.items():
        better: Better = "higher" if key == "spec_accept_length" else "neither"
        label = key.removesuffix("_peak").replace("_", " ") + (
            ", highest sample" if key.endswith("_peak") else ""
        )
        figures.append(Figure(f"server_{key}", f"server: {label}", value, "", better, 0, 0))
    before, after, m = runner.facts, runner.after, runner.method
    versions = (serverfields.weight_version(before.model_info), serverfields.weight_version(after.model_info))
    if versions[0] != versions[1]:
        runner.notes.append(
            f"the server's weight_version changed during the run: {versions[0]} -> {versions[1]}"
        )
    whole = mw.combine(counted)
    return BenchRun(
        schema=SCHEMA,
        run_id=runner.prompts.run_id,
        started_at=runner.started_at,
        duration_s=round(time.perf_counter() - runner.t0, 3),
        complete=runner.complete,
        method={**m.model_dump(mode="json"), "seed": runner.seed, "temperature_used": m.sampling_temperature},
        method_fingerprint=m.fingerprint(),
        environment=describe_environment(runner.target),
        server={
            "model_id": before.model_id,
            "context_length": before.context_length,
            "max_total_tokens": before.max_total_tokens,
            "max_running_requests": before.max_running_requests,
            "gpus": gpus,
            "server_info": before.server_info,
            "models": before.models,
            "model_info": before.model_info,
            "metrics_before": before.metrics,
            "metrics_after": after.metrics,
            "server_figures": server_figures,
            "unreadable": before.unreadable,
            "weight_version": versions[0],
            "weight_version_at_end": versions[1],
            # /metrics counter differences per phase, added over its valid passes
            "windows": {name: w.to_json() for name, w in _by_name(runner).items()},
            "window_measured": None if whole is None else whole.to_json(),
        },
        groups=runner.groups,
        figures=figures,
        sweep=sweep,
        # later turns of a conversation are meant to hit the cache: only first prompts must be cold
        cache_check=cache_check(
            [r for r in measured if r.turn in (None, 0)], m.max_cached_fraction, window=mw.combine(cold)
        ),
        prompts_unique=len(set(prefixes)) == len(prefixes),
        errors_total=sum(1 for r in measured if not r.ok),
        requests_total=len(measured),
        notes=runner.notes,
        requests=runner.records,
        workload=m.workload,
        invalid_groups=runner.invalid_groups,
        details=runner.details,
    )


def _windows(runner: BenchContext) -> tuple[list[mw.Window], list[mw.Window]]:
    """The counter windows of the valid phases: those that must find a cold cache (no conversation
    resends an earlier turn), and all of them."""
    later_turns = {(r.group, r.repeat) for r in runner.records if r.turn not in (None, 0)}
    valid = [(g, w) for g, w in zip(runner.groups, runner.windows, strict=True) if not g.contaminated]
    return [w for g, w in valid if (g.name, g.repeat) not in later_turns], [w for _, w in valid]


def _by_name(runner: BenchContext) -> dict[str, mw.Window]:
    names: dict[str, list[mw.Window]] = {}
    for g, w in zip(runner.groups, runner.windows, strict=True):
        if not g.contaminated:
            names.setdefault(g.name, []).append(w)
    return {name: combined for name, ws in names.items() if (combined := mw.combine(ws)) is not None}


def sweep_points(groups: list[GroupSummary], records: list[RequestRecord], gpus: int) -> list[SweepPoint]:
    """One point per sweep level, pooled over passes: per-user = median per-request decode tok/s;
    per-GPU = median over passes of the level's aggregate output tok/s, over the GPUs."""
    names: list[str] = []
    for g in groups:
        if g.phase in SWEEP_PHASES and g.name not in names:
            names.append(g.name)
    points = []
    for name in names:
        gs = [g for g in groups if g.name == name and not g.contaminated]
        if not gs:
            continue
        valid = {g.repeat for g in gs}
        recs = [
            r
            for r in records
            if r.group == name and r.repeat in valid and r.phase in SWEEP_PHASES and not r.cut_by_time_bound
        ]
        aggregate = stats.median(g.aggregate_output_tps for g in gs)
        points.append(
            SweepPoint(
                concurrency=gs[0].concurrency,
                per_user_tps=stats.median(stats.decode_tps(r) for r in recs if r.ok),
                per_gpu_tps=None if aggregate is None else aggregate / gpus,
                ttft_median_s=stats.median(stats.ttft(r) for r in recs if r.ok),
                completed=sum(g.completed for g in gs),
                failed=sum(g.failed for g in gs),
                curve=gs[0].phase,
            )
        )
    for curve in {p.curve for p in points}:
        on_curve = [(i, p.per_user_tps, p.per_gpu_tps) for i, p in enumerate(points) if p.curve == curve]
        measured = [(i, user, gpu) for i, user, gpu in on_curve if user is not None and gpu is not None]
        for k in stats.pareto_front([(user, gpu) for _, user, gpu in measured]):
            points[measured[k][0]].on_front = True
    return points


def cache_check(
    records: list[RequestRecord],
    allowed: float,
    allowed_tokens: int = CACHED_TOKENS_ALLOWED,
    window: mw.Window | None = None,
) -> CacheCheck:
    done = [r for r in records if r.ok]
    reported = [r for r in done if r.cached_tokens is not None]
    if not reported:
        # SGLang reports usage.prompt_tokens_details only with --enable-cache-report: the counters
        # over the measured phases are the other witness. Neither: not measured, never a pass.
        return _cache_check_from_counters(done, allowed, allowed_tokens, window)
    fractions = [
        (r.cached_tokens or 0) / max(1, r.prompt_tokens or r.prompt_tokens_estimated) for r in reported
    ]
    # A hit: more than the fraction AND more than the fixed allowance (a chat template's opening).
    hits = sum(
        1
        for r, f in zip(reported, fractions, strict=True)
        if f > allowed and (r.cached_tokens or 0) > allowed_tokens
    )
    worst = max(fractions)
    ok = hits == 0
    message = (
        f"cached prompt tokens stayed near zero (at most {worst:.1%} of a prompt, over {len(reported)} requests; "
        f"up to {allowed_tokens} tokens are always allowed)"
        if ok
        else f"{hits} of {len(reported)} requests had more than {allowed:.0%} of their prompt (and more "
        f"than {allowed_tokens} tokens) cached (up to {worst:.1%}): a prefix cache helped, so prefill and TTFT "
        "figures are optimistic"
    )
    return CacheCheck(
        reported=True,
        requests=len(reported),
        requests_with_hits=hits,
        max_cached_fraction=round(worst, 6),
        allowed_fraction=allowed,
        ok=ok,
        message=message,
        allowed_tokens=allowed_tokens,
    )


def _cache_check_from_counters(
    done: list[RequestRecord], allowed: float, allowed_tokens: int, window: mw.Window | None
) -> CacheCheck:
    share = None if window is None else window.cached_share
    if window is None or share is None:
        why = (
            window.why
            if window is not None and window.why
            else "no /metrics counters over the phases that must find a cold cache"
        )
        return CacheCheck(
            reported=False,
            requests=len(done),
            requests_with_hits=0,
            max_cached_fraction=None,
            allowed_fraction=allowed,
            ok=False,
            allowed_tokens=allowed_tokens,
            source="none",
            message=(
                "cold prefix cache not measured: the server reported no cached_tokens and "
                f"{why}; start it with enable-cache-report: true (per request) or "
                "enable-metrics: true (counters)"
            ),
        )
    cached = window.cached_tokens or 0.0
    # the per-request allowance (a chat template's opening), over the requests the window counted
    requests = window.deltas.get(mw.REQUESTS) or len(done)
    ok = share <= allowed or cached <= allowed_tokens * max(1, requests)
    message = (
        f"cached prompt tokens stayed near zero ({share:.1%} of {window.prompt_tokens:.0f} prompt tokens "
        "over the measured phases, from the /metrics counters)"
        if ok
        else f"{share:.1%} of the prompt tokens of the measured phases were served from the prefix cache "
        f"({cached:.0f} of {window.prompt_tokens:.0f}, from the /metrics counters; allowed {allowed:.0%}): "
        "prefill and TTFT figures are optimistic"
    )
    return CacheCheck(
        reported=True,
        requests=len(done),
        requests_with_hits=0 if ok else len(done),
        max_cached_fraction=round(share, 6),
        allowed_fraction=allowed,
        ok=ok,
        message=message,
        allowed_tokens=allowed_tokens,
        source="metrics",
    )
