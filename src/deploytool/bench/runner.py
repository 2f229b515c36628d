"""Runs the method against one endpoint: warm-up, decode at concurrency 1, decode under load,
prefill, and the optional concurrency sweep. Every request streams through the one
`EndpointClient`, so a server fault is a recorded error, never an exception or a hang.

Phases run one after the other, never overlapping, so one phase's load cannot slow another's.
"""

from __future__ import annotations

import asyncio
import gc
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from .. import metrics_window, serverfields
from ..client import ChatResult, EndpointClient
from ..targets import Target
from . import stats
from .environment import describe_environment
from .method import BenchMethod
from .prompts import Prompt, PromptFactory
from .results import SCHEMA, BenchRun, CacheCheck, Figure, GroupSummary, RequestRecord, SweepPoint
from .server import PEAK_GAUGES, ServerFacts, read_metrics, read_server_facts, server_side_figures

# Room left in the context for the chat template and tokenizer differences from our estimate.
_CONTEXT_MARGIN_FRACTION = 0.03
_CONTEXT_MARGIN_TOKENS = 64
_SWEEP_CAP_WHEN_UNKNOWN = 64
# Cached prompt tokens the cache check always tolerates besides max_cached_fraction: the chat
# template's opening (role markers, a system preamble) is the same in every prompt, and a
# per-token radix cache reuses it however unique the text after it is.
CACHED_TOKENS_ALLOWED = 16


@dataclass
class _Spec:
    phase: str
    group: str
    concurrency: int
    index: int
    prompt_tokens: int
    max_tokens: int


class BenchRunner:
    def __init__(self, target: Target, method: BenchMethod, *, progress: bool = True):
        self.target = target
        self.method = method
        self.show_progress = progress
        self.seed = method.seed if method.seed is not None else secrets.randbits(32)
        self.prompts = PromptFactory(self.seed)
        self.records: list[RequestRecord] = []
        self.notes: list[str] = []
        self.complete = True
        self.t0 = 0.0
        self.deadline = 0.0
        self.model_id = "default"
        self._progress: Any = None
        self.metric_peaks: dict[str, float] = {}
        # /metrics counters before and after each measured phase (deploytool.metrics_window)
        self.windows: dict[str, metrics_window.Window] = {}
        self._first_snapshot: metrics_window.CounterSnapshot | None = None
        self._last_snapshot: metrics_window.CounterSnapshot | None = None

    # --- the run -------------------------------------------------------------------
    async def run(self) -> BenchRun:
        m = self.method
        started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.t0 = time.perf_counter()
        self.deadline = self.t0 + m.run_timeout_s
        async with EndpointClient(self.target.url, timeout=m.request_timeout_s,
                                  max_connections=max([1, *m.load_concurrency, m.sweep_max_concurrency])) as client:
            before = await read_server_facts(client)
            self.model_id = before.model_id or (self.target.profile.model.served_name if self.target.profile else "default")
            sampler = asyncio.create_task(self._sample_metrics(client)) if before.metrics is not None else None
            try:
                with self._progress_bar():
                    groups = await self._run_phases(client, before)
            finally:
                if sampler is not None:
                    sampler.cancel()
                    await asyncio.gather(sampler, return_exceptions=True)
            after = await read_server_facts(client)
        return self._assemble(started_at, before, after, groups)

    async def _run_phases(self, client: EndpointClient, facts: ServerFacts) -> list[GroupSummary]:
        m = self.method
        warm = [_Spec("warmup", "warmup", 1, i, m.decode_prompt_tokens, m.warmup_output_tokens)
                for i in range(m.warmup_requests)]
        await self._run_group(client, warm, concurrency=1)
        # Warm-up is excluded by start time: nothing that started before this instant is measured.
        self.measure_from = self._now()
        groups: list[GroupSummary] = []

        decode = [_Spec("decode", "decode_c1", 1, i, m.decode_prompt_tokens, m.decode_output_tokens)
                  for i in range(m.decode_requests)]
        groups.append(await self._measure(client, decode, "decode_c1", "decode", 1))

        for c in m.load_concurrency:
            specs = [_Spec("load", f"load_c{c}", c, i, m.decode_prompt_tokens, m.load_output_tokens)
                     for i in range(c * m.load_requests_per_slot)]
            groups.append(await self._measure(client, specs, f"load_c{c}", "load", c))

        for size in self._prefill_sizes(facts):
            specs = [_Spec("prefill", f"prefill_{size}", 1, i, size, m.prefill_output_tokens)
                     for i in range(m.prefill_prompts_each)]
            groups.append(await self._measure(client, specs, f"prefill_{size}", "prefill", 1))

        if m.sweep:
            for c in self._sweep_levels(facts):
                specs = [_Spec("sweep", f"sweep_c{c}", c, i, m.decode_prompt_tokens, m.sweep_output_tokens)
                         for i in range(c * m.sweep_requests_per_slot)]
                groups.append(await self._measure(client, specs, f"sweep_c{c}", "sweep", c))
        return groups

    async def _measure(self, client: EndpointClient, specs: list[_Spec], name: str, phase: str,
                       concurrency: int) -> GroupSummary:
        before = await metrics_window.snapshot(client)
        records = await self._run_group(client, specs, concurrency)
        after = await metrics_window.snapshot(client)
        self.windows[name] = metrics_window.window(before, after)
        self._first_snapshot = self._first_snapshot or before
        self._last_snapshot = after
        # A request cut by the run's time bound measured nothing about the server: left out.
        measured = [r for r in records if r.start >= self.measure_from and not r.cut_by_time_bound]
        return stats.summarize(name, phase, concurrency, measured)

    async def _run_group(self, client: EndpointClient, specs: list[_Spec], concurrency: int) -> list[RequestRecord]:
        """`concurrency` workers pull from one queue: exactly that many requests in flight."""
        if not specs:
            return []
        task = self._progress.add_task(specs[0].group, total=len(specs)) if self._progress else None
        queue: asyncio.Queue[_Spec] = asyncio.Queue()
        for spec in specs:
            queue.put_nowait(spec)
        out: list[RequestRecord] = []

        async def worker() -> None:
            while not queue.empty():
                spec = queue.get_nowait()
                if self._remaining() <= 0:
                    self._time_bound_reached(spec.group)
                    continue
                record = await self._one(client, spec)
                out.append(record)
                if task is not None:
                    self._progress.advance(task)

        # The cyclic GC is paused while a group runs, as timeit does: every streamed chunk is a
        # new dict, and collections scanning thousands of live ones cost the client a third of its
        # CPU per token (benchmarks/client_overhead.py). Refcounting still frees what is dropped;
        # one collection runs between groups.
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            await asyncio.gather(*(worker() for _ in range(min(concurrency, len(specs)))))
        finally:
            if was_enabled:
                gc.enable()
                gc.collect()
        if task is not None:
            self._progress.remove_task(task)
        out.sort(key=lambda r: r.start)
        self.records.extend(out)
        return out

    async def _one(self, client: EndpointClient, spec: _Spec) -> RequestRecord:
        prompt = self.prompts.make(spec.prompt_tokens, spec.group)
        payload = self._payload(prompt, spec.max_tokens)
        timeout = max(1.0, min(self.method.request_timeout_s, self._remaining()))
        result = await client.chat(payload, timeout=timeout)
        record = self._record(spec, prompt, result)
        if timeout < self.method.request_timeout_s and (result.error or "").startswith("timed out"):
            # Its timeout was the run's remaining time, not request_timeout_s: the run's bound cut it.
            record.cut_by_time_bound = True
            record.error = (f"cut by the run's time bound (run_timeout_s {self.method.run_timeout_s:g} s): "
                            f"{result.error}")
            self._time_bound_reached(spec.group)
        return record

    def _time_bound_reached(self, group: str) -> None:
        if self.complete:
            self.complete = False
            self.notes.append(f"the run's time bound ({self.method.run_timeout_s:g} s) was reached during {group}: "
                              "a request in flight then is recorded as cut (not a server failure) and later "
                              "requests were not sent")

    def _payload(self, prompt: Prompt, max_tokens: int) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.model_id,
            "messages": [{"role": "user", "content": prompt.text}],
            "max_tokens": max_tokens,
            # ignore_eos makes every request produce exactly max_tokens (SGLang and the sim both
            # honour it), so output lengths are the method's, not the model's whim.
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": self.method.sampling_temperature,
            "chat_template_kwargs": {"enable_thinking": self.method.thinking},
        }
        return payload

    async def _sample_metrics(self, client: EndpointClient) -> None:
        """Peaks of the load gauges, read every metrics_interval_s while the phases run (a gauge
        read once after the run would only show an idle server)."""
        scratch = ServerFacts()
        while True:
            await asyncio.sleep(self.method.metrics_interval_s)
            metrics = await read_metrics(client, scratch, timeout=5.0) or {}
            for name, key in PEAK_GAUGES.items():
                if name in metrics:
                    self.metric_peaks[key] = max(self.metric_peaks.get(key, 0.0), metrics[name])

    # --- one result -> one record ----------------------------------------------------
    def _record(self, spec: _Spec, prompt: Prompt, result: ChatResult) -> RequestRecord:
        usage = result.usage or {}
        completion = usage.get("completion_tokens")
        chunks = len(result.chunk_times)
        output = completion if isinstance(completion, int) else (chunks or None)
        reasoning, answer = _split_reasoning(result, output)
        rel = self._rel
        return RequestRecord(
            phase=spec.phase, group=spec.group, concurrency=spec.concurrency, index=spec.index,
            ok=result.ok, error=result.error, status=result.status,
            prompt_prefix=prompt.prefix, prompt_tokens_estimated=prompt.estimated_tokens,
            prompt_tokens=usage.get("prompt_tokens"), cached_tokens=result.cached_tokens,
            max_tokens=spec.max_tokens, output_tokens=output,
            output_tokens_source=("usage" if isinstance(completion, int) else "chunks") if output else None,
            reasoning_tokens=reasoning, answer_tokens=answer, finish_reason=result.finish_reason,
            start=rel(result.t_start), first_token=rel(result.t_first_token),
            first_answer=rel(result.t_first_answer),
            last_token=rel(result.chunk_times[-1]) if result.chunk_times else None,
            end=rel(result.t_end),
            chunk_offsets=[round(t - result.t_start, 6) for t in result.chunk_times],
        )

    def _rel(self, t: float | None) -> Any:
        return None if t is None else round(t - self.t0, 6)

    # --- sizes and levels -------------------------------------------------------------
    def _prefill_sizes(self, facts: ServerFacts) -> list[int]:
        m = self.method
        limits = [x for x in (facts.context_length, facts.max_total_tokens,
                              self.target.profile.model.context_length if self.target.profile else None) if x]
        if not limits:
            self.notes.append("the server reported no context length: prefill sizes were not capped")
            return list(dict.fromkeys(m.prefill_prompt_tokens))
        room = min(limits)
        cap = int(room * (1 - _CONTEXT_MARGIN_FRACTION)) - _CONTEXT_MARGIN_TOKENS - m.prefill_output_tokens
        sizes: list[int] = []
        for size in m.prefill_prompt_tokens:
            if size > cap:
                self.notes.append(f"prefill {size} tokens capped to {cap} by the context length ({room})")
                size = cap
            if size >= 16 and size not in sizes:
                sizes.append(size)
        return sizes

    def _sweep_levels(self, facts: ServerFacts) -> list[int]:
        top = facts.max_running_requests
        if top is None:
            top = _SWEEP_CAP_WHEN_UNKNOWN
            self.notes.append(f"the server reported no max running requests: the sweep stops at {top}")
        top = min(top, self.method.sweep_max_concurrency)
        levels, c = [], 1
        while c < top:
            levels.append(c)
            c *= 2
        levels.append(top)
        return levels

    # --- the result ---------------------------------------------------------------------
    def _assemble(self, started_at: str, before: ServerFacts, after: ServerFacts,
                  groups: list[GroupSummary]) -> BenchRun:
        measured = [r for r in self.records if r.phase != "warmup" and not r.cut_by_time_bound]
        prefixes = [r.prompt_prefix for r in self.records]
        gpus = before.gpus or (self.target.profile.match.gpu_count if self.target.profile else None) or 1
        sweep = _sweep_points([g for g in groups if g.phase == "sweep"], gpus)
        whole = (metrics_window.window(self._first_snapshot, self._last_snapshot)
                 if self._first_snapshot and self._last_snapshot else None)
        server_figures = server_side_figures(after, self.metric_peaks, whole)
        versions = (serverfields.weight_version(before.model_info), serverfields.weight_version(after.model_info))
        if versions[0] != versions[1]:
            self.notes.append(f"the server's weight_version changed during the run: {versions[0]} -> {versions[1]}")
        return BenchRun(
            schema=SCHEMA, run_id=self.prompts.run_id, started_at=started_at,
            duration_s=round(time.perf_counter() - self.t0, 3), complete=self.complete,
            method={**self.method.model_dump(mode="json"), "seed": self.seed,
                    "temperature_used": self.method.sampling_temperature},
            method_fingerprint=self.method.fingerprint(),
            environment=describe_environment(self.target),
            server={
                "model_id": before.model_id, "context_length": before.context_length,
                "max_total_tokens": before.max_total_tokens,
                "max_running_requests": before.max_running_requests, "gpus": gpus,
                "server_info": before.server_info, "models": before.models, "model_info": before.model_info,
                "metrics_before": before.metrics, "metrics_after": after.metrics,
                "server_figures": server_figures, "unreadable": before.unreadable,
                "weight_version": versions[0], "weight_version_at_end": versions[1],
                "windows": {name: w.to_json() for name, w in self.windows.items()},
                "window_measured": None if whole is None else whole.to_json(),
            },
            groups=groups,
            figures=_figures(groups, sweep, server_figures),
            sweep=sweep,
            cache_check=_cache_check(measured, self.method.max_cached_fraction, window=whole),
            prompts_unique=len(set(prefixes)) == len(prefixes),
            errors_total=sum(1 for r in measured if not r.ok),
            requests_total=len(measured),
            notes=self.notes,
            requests=self.records,
        )

    # --- helpers ------------------------------------------------------------------------
    def _now(self) -> float:
        return round(time.perf_counter() - self.t0, 6)

    def _remaining(self) -> float:
        return self.deadline - time.perf_counter()

    @contextmanager
    def _progress_bar(self) -> Iterator[None]:
        if not self.show_progress:
            yield
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("bench {task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=Console(stderr=True), transient=True) as bar:
            self._progress = bar
            try:
                yield
            finally:
                self._progress = None


def _split_reasoning(result: ChatResult, output: int | None) -> tuple[int | None, int | None]:
    """Reasoning vs answer tokens: the server's completion_tokens_details when it gives them,
    else the output split in proportion to reasoning vs answer chunks."""
    if output is None:
        return None, None
    details = (result.usage or {}).get("completion_tokens_details") or {}
    if isinstance(details.get("reasoning_tokens"), int):
        return details["reasoning_tokens"], output - details["reasoning_tokens"]
    if not result.reasoning_content:
        return 0, output
    # The client counts these while streaming (it keeps no chunk objects unless asked).
    reasoning_chunks, answer_chunks = result.reasoning_chunks, result.answer_chunks
    total = reasoning_chunks + answer_chunks
    if total == 0:
        return 0, output
    reasoning = round(output * reasoning_chunks / total)
    return reasoning, output - reasoning


def _sweep_points(groups: list[GroupSummary], gpus: int) -> list[SweepPoint]:
    points = [SweepPoint(concurrency=g.concurrency, per_user_tps=g.decode_tps_median,
                         per_gpu_tps=None if g.aggregate_output_tps is None else g.aggregate_output_tps / gpus,
                         ttft_median_s=g.ttft_median_s, completed=g.completed, failed=g.failed)
              for g in groups]
    valid = [i for i, p in enumerate(points) if p.per_user_tps is not None and p.per_gpu_tps is not None]
    front = stats.pareto_front([(points[i].per_user_tps, points[i].per_gpu_tps) for i in valid])
    for k in front:
        points[valid[k]].on_front = True
    return points


def _cache_check(records: list[RequestRecord], allowed: float,
                 allowed_tokens: int = CACHED_TOKENS_ALLOWED,
                 window: metrics_window.Window | None = None) -> CacheCheck:
    done = [r for r in records if r.ok]
    reported = [r for r in done if r.cached_tokens is not None]
    if not reported:
        # SGLang reports usage.prompt_tokens_details only with --enable-cache-report: the counters
        # over the measured phases are the other witness. Neither: not measured, never a pass.
        return _cache_check_from_counters(done, allowed, allowed_tokens, window)
    fractions = [(r.cached_tokens or 0) / max(1, r.prompt_tokens or r.prompt_tokens_estimated) for r in reported]
    # A hit: more than the fraction AND more than the fixed allowance (a chat template's opening).
    hits = sum(1 for r, f in zip(reported, fractions) if f > allowed and (r.cached_tokens or 0) > allowed_tokens)
    worst = max(fractions)
    ok = hits == 0
    message = (f"cached prompt tokens stayed near zero (at most {worst:.1%} of a prompt, over {len(reported)} requests; "
               f"up to {allowed_tokens} tokens are always allowed)"
               if ok else f"{hits} of {len(reported)} requests had more than {allowed:.0%} of their prompt (and more "
               f"than {allowed_tokens} tokens) cached (up to {worst:.1%}): a prefix cache helped, so prefill and TTFT "
               "figures are optimistic")
    return CacheCheck(reported=True, requests=len(reported), requests_with_hits=hits,
                      max_cached_fraction=round(worst, 6), allowed_fraction=allowed, ok=ok, message=message,
                      allowed_tokens=allowed_tokens)


def _cache_check_from_counters(done: list[RequestRecord], allowed: float, allowed_tokens: int,
                               window: metrics_window.Window | None) -> CacheCheck:
    share = None if window is None else window.cached_share
    if share is None:
        why = (window.why if window is not None and window.why else "no /metrics counters over the run")
        return CacheCheck(reported=False, requests=len(done), requests_with_hits=0, max_cached_fraction=None,
                          allowed_fraction=allowed, ok=False, allowed_tokens=allowed_tokens, source="none",
                          message=("cold prefix cache not measured: the server reported no cached_tokens and "
                                   f"{why}; start it with enable-cache-report: true (per request) or "
                                   "enable-metrics: true (counters)"))
    cached = window.cached_tokens or 0.0  # type: ignore[union-attr]
    # the per-request allowance (a chat template's opening), over the requests of the window
    ok = share <= allowed or cached <= allowed_tokens * max(1, len(done))
    message = (f"cached prompt tokens stayed near zero ({share:.1%} of {window.prompt_tokens:.0f} prompt tokens "  # type: ignore[union-attr]
               "over the measured phases, from the /metrics counters)" if ok else
               f"{share:.1%} of the prompt tokens of the measured phases were served from the prefix cache "
               f"({cached:.0f} of {window.prompt_tokens:.0f}, from the /metrics counters; allowed {allowed:.0%}): "  # type: ignore[union-attr]
               "prefill and TTFT figures are optimistic")
    return CacheCheck(reported=True, requests=len(done), requests_with_hits=0 if ok else len(done),
                      max_cached_fraction=round(share, 6), allowed_fraction=allowed, ok=ok, message=message,
                      allowed_tokens=allowed_tokens, source="metrics")


def _figures(groups: list[GroupSummary], sweep: list[SweepPoint], server: dict[str, float]) -> list[Figure]:
    out: list[Figure] = []

    def add(key: str, label: str, value: float | None, unit: str, better: str, g: GroupSummary) -> None:
        out.append(Figure(key=key, label=label, value=value, unit=unit, better=better,  # type: ignore[arg-type]
                          completed=g.completed, failed=g.failed))

    for g in groups:
        if g.phase == "decode":
            add("decode_c1_tps", "decode, 1 request", g.decode_tps_median, "tok/s", "higher", g)
            add("ttft_c1_s", "time to first token, 1 request", g.ttft_median_s, "s", "lower", g)
            add("ttfa_c1_s", "time to first answer token, 1 request", g.ttfa_median_s, "s", "lower", g)
        elif g.phase == "load":
            c = g.concurrency
            add(f"load_c{c}_aggregate_tps", f"decode, {c} concurrent, total", g.aggregate_output_tps, "tok/s", "higher", g)
            add(f"load_c{c}_per_request_tps", f"decode, {c} concurrent, per request", g.decode_tps_median,
                "tok/s", "higher", g)
            add(f"load_c{c}_ttft_s", f"time to first token, {c} concurrent", g.ttft_median_s, "s", "lower", g)
        elif g.phase == "prefill":
            size = g.name.split("_", 1)[1]
            add(f"prefill_{size}_tps", f"prefill, {int(size):,} tokens", g.prefill_tps_median, "tok/s", "higher", g)
            add(f"prefill_{size}_ttft_s", f"time to first token, {int(size):,}-token prompt", g.ttft_median_s,
                "s", "lower", g)
    if sweep:
        best = max((p for p in sweep if p.per_gpu_tps is not None), key=lambda p: p.per_gpu_tps, default=None)
        if best is not None:
            out.append(Figure("sweep_peak_per_gpu_tps", f"sweep peak per GPU (at {best.concurrency} concurrent)",
                              best.per_gpu_tps, "tok/s", "higher", best.completed, best.failed))
    for key, value in server.items():
        better = "higher" if key == "spec_accept_length" else "neither"
        out.append(Figure(f"server_{key}", f"server: {key.replace('_', ' ')}", value, "", better, 0, 0))
    return out


def run_bench_sync(target: Target, method: BenchMethod, *, progress: bool = True) -> BenchRun:
    return asyncio.run(BenchRunner(target, method, progress=progress).run())
