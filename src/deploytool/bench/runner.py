"""Runs one workload against one endpoint: warm-up, then `repeats` passes of the workload, each
phase measured on an idle server. Every request streams through the one `EndpointClient`, so a
server fault is a recorded error, never an exception or a hang.

Phases run one after the other, never overlapping, so one phase's load cannot slow another's.
Before each phase the runner waits for /metrics to show no running and no queued request; a
phase during which the server finished more requests than the phase sent (work left over from
someone else) is thrown away and re-run once, then reported invalid (docs/bench.md).
"""

from __future__ import annotations

import asyncio
import gc
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from typing import Any

from .. import terminal_text
from ..checks.targets import Target
from ..server import metrics_window as mw
from ..server.chat_result import ChatResult
from ..server.client import EndpointClient
from ..server.facts import PEAK_GAUGES, ServerFacts, read_metrics, read_server_facts
from ..server.fast_stream import StreamClient
from . import stats, workloads
from .assemble import assemble_run
from .method import BenchMethod
from .prompts import PromptFactory, estimate_tokens
from .records import chat_payload, request_record
from .results import BenchRun, GroupSummary, RequestRecord
from .spec import Job, Spec

# Room left in the context for the chat template and tokenizer differences from our estimate.
_CONTEXT_MARGIN_FRACTION = 0.03
_CONTEXT_MARGIN_TOKENS = 64


class BenchRunner:
    """One run. `run()` does it all; `session()` + `run_pass(r)` + `result()` let two runners be
    driven alternately (compare --interleave)."""

    def __init__(self, target: Target, method: BenchMethod, *, progress: bool = True, http: str = "raw"):
        self.target = target
        # "raw": bench's own streaming path (server/fast_stream.py) for http endpoints; "httpx": the
        # shared EndpointClient for everything (https endpoints always use it)
        self.http = http
        self.stream: StreamClient | None = None
        self.method = method
        self.workload = workloads.get(method.workload)
        self.settings = self.workload.Settings.model_validate(method.workload_settings[method.workload])
        self.show_progress = progress
        self.seed = method.seed if method.seed is not None else secrets.randbits(32)
        self.prompts = PromptFactory(self.seed)
        self.records: list[RequestRecord] = []
        self.groups: list[GroupSummary] = []
        self.pass_figures: list[list[Any]] = []
        self.notes: list[str] = []
        self.details: dict[str, Any] = {}
        self.invalid_groups: list[str] = []
        self.complete = True
        self.t0 = time.perf_counter()
        self.deadline = self.t0 + method.run_timeout_s
        self.measure_from = 0.0
        self.model_id = "default"
        self.repeat = 0
        self.client: EndpointClient | None = None
        self.facts = ServerFacts()
        self.after = ServerFacts()
        self.started_at = ""
        self._progress: Any = None
        self.metric_peaks: dict[str, float] = {}
        self._phase_peak: dict[str, float] = {}
        self._current: list[RequestRecord] = []
        self._pass_records: dict[str, list[RequestRecord]] = {}
        # /metrics counter differences over each kept phase attempt, one per group in self.groups
        # (deploytool.server.metrics_window); the cold-cache check and the server figures add them up
        self.windows: list[mw.Window] = []

    @property
    def gpus(self) -> int:
        return self.facts.gpus or (self.target.profile.match.gpu_count if self.target.profile else None) or 1

    # --- the run -------------------------------------------------------------------------
    async def run(self) -> BenchRun:
        async with self.session():
            for r in range(self.method.repeats):
                await self.run_pass(r)
        return self.result()

    @property
    def _endpoint(self) -> EndpointClient:
        """The session's client: a runner sends requests only inside session()."""
        if self.client is None:
            raise RuntimeError("BenchRunner sends requests only inside session()")
        return self.client

    @asynccontextmanager
    async def session(self) -> AsyncIterator[BenchRunner]:
        m = self.method
        self.started_at = datetime.now(UTC).isoformat(timespec="seconds")
        self.t0 = time.perf_counter()
        self.deadline = self.t0 + m.run_timeout_s
        # a slot started with an API key wants it on every request, bench's own too
        api_key = getattr(self.target, "api_key", None)
        async with EndpointClient(
            self.target.url, timeout=m.request_timeout_s, max_connections=1024, api_key=api_key
        ) as client:
            self.client = client
            if self.http == "raw" and self.target.url.startswith("http://"):
                self.stream = client.fast_stream()
            # what the server says about itself, each read within a request's budget (10 s at most)
            self.facts = await read_server_facts(client, timeout=min(10.0, m.request_timeout_s))
            self.model_id = self.facts.model_id or (
                self.target.profile.model.served_name if self.target.profile else "default"
            )
            sampler = asyncio.create_task(self._sample_metrics()) if self.facts.metrics is not None else None
            if m.preset == "quick" and m.workload != "table":
                self.notes.append(
                    f"quick run: the {m.workload} workload ran with reduced sizes "
                    f"({self.workload.QUICK}), not the source's"
                )
            try:
                with self._progress_bar():
                    await self._warmup()
                    yield self
            finally:
                if sampler is not None:
                    # a flag as well as cancel(): Python 3.11's asyncio.wait_for (under client.get)
                    # can swallow a cancellation that lands as its inner call completes
                    self._sampling = False
                    sampler.cancel()
                    await asyncio.gather(sampler, return_exceptions=True)
                self.after = await read_server_facts(client, timeout=min(10.0, m.request_timeout_s))
                self.client = None
                if self.stream is not None:
                    await self.stream.aclose()
                    self.stream = None

    async def _warmup(self) -> None:
        m = self.method
        specs = [
            Spec("warmup", "warmup", 1, i, m.decode_prompt_tokens, m.warmup_output_tokens)
            for i in range(m.warmup_requests)
        ]
        self._current = []
        await self._pool([self.job(s) for s in specs], 1, "warmup")
        self.records.extend(sorted(self._current, key=lambda r: r.start))
        # Warm-up is excluded by start time: nothing that started before this instant is measured.
        self.measure_from = self._now()

    async def run_pass(self, repeat: int) -> None:
        self.repeat = repeat
        self._pass_records = {}
        first = len(self.groups)
        await self.workload.run(self)
        self.pass_figures.append(self.workload.figures(self, self.groups[first:], self._pass_records))

    def result(self) -> BenchRun:
        return assemble_run(self)

    # --- one measured phase --------------------------------------------------------------
    def _metrics_gone(self) -> str | None:
        """Why /metrics could not be read at all before the run (a time-out, a refused answer),
        as opposed to a server without metrics (an HTTP status): then no phase waits on it again."""
        why = self.facts.unreadable.get("/metrics")
        return None if why is None or why.startswith("HTTP ") else why

    async def _idle_and_snapshot(self) -> tuple[mw.IdleWait, mw.CounterSnapshot]:
        gone = self._metrics_gone()
        if gone:
            why = f"/metrics unreadable: {gone}"
            return (
                mw.IdleWait(None, 0.0, None, None, self.method.idle_timeout_s, why=why),
                mw.CounterSnapshot(time.monotonic(), None, why),
            )
        return await mw.wait_idle(self.client, self.method.idle_timeout_s), await mw.snapshot(self.client)

    async def measure(
        self,
        name: str,
        phase: str,
        concurrency: int,
        make_jobs: Callable[[], list[Job]],
        *,
        schedule: list[float] | None = None,
    ) -> GroupSummary:
        """Run one phase on an idle server: `concurrency` workers over the jobs (closed loop), or
        with `schedule`, job i started at schedule[i] seconds after the phase began (open loop)."""
        attempts = 0
        while True:
            attempts += 1
            idle, before = await self._idle_and_snapshot()
            self._phase_peak = {}
            self._current = []
            jobs = make_jobs()
            await (
                self._open_loop(jobs, schedule, name)
                if schedule is not None
                else self._pool(jobs, concurrency, name)
            )
            after = before if self._metrics_gone() else await mw.snapshot(self.client)
            window = mw.window(before, after)
            records = sorted(self._current, key=lambda r: r.start)
            sent = len(records)
            server_requests = window.delta(mw.REQUESTS)
            running_after = (after.gauges or {}).get(mw.RUNNING)
            peak = (
                max(self._phase_peak.get(mw.RUNNING, 0.0), running_after)
                if running_after is not None
                else None
            )
            # The counter is the evidence: SGLang counts every finished request but its own health
            # checks (log_metrics=False in http_server.py's health_generate). The running gauge is
            # sampled, and may catch one health check beside the phase's own: two beyond it count.
            # Without /metrics neither is measured and the phase is taken as it is (noted once).
            contaminated = (server_requests is not None and server_requests > sent) or (
                schedule is None and peak is not None and peak >= concurrency + 2
            )
            if contaminated and attempts == 1 and self.method.rerun_contaminated and self._remaining() > 0:
                for r in records:
                    r.phase = "discarded"
                self.records.extend(records)
                self.notes.append(
                    f"{name} (pass {self.repeat + 1}): the server finished {server_requests} requests "
                    f"(running peak {peak}) while the phase sent {sent}: leftover work; re-run"
                )
                continue
            break
        self.records.extend(records)
        measured = [r for r in records if r.start >= self.measure_from and not r.cut_by_time_bound]
        self._pass_records[name] = measured
        group = stats.summarize(name, phase, concurrency, measured)
        group.repeat = self.repeat
        for key, value in stats.itl_summary(measured).items():
            setattr(group, key, value)
        group.idle_wait = idle.to_dict()
        group.server_requests = server_requests
        group.server_running_peak = peak
        group.server_cached_share = window.cached_share if window.measured else None
        group.server_window = window.to_json()
        group.contaminated = contaminated
        group.attempts = attempts
        if not window.measured:
            self._note_once(
                f"not measured: idle-server wait, leftover-work check and server counter figures "
                f"({window.why})"
            )
        if idle.idle is False:
            self.notes.append(
                f"{name} (pass {self.repeat + 1}): the server was still busy after "
                f"{idle.timeout_s:g} s (running {idle.running:g}, queued {idle.queued:g})"
            )
        if contaminated:
            self.invalid_groups.append(f"{name}#{self.repeat + 1}")
            self.notes.append(
                f"{name} (pass {self.repeat + 1}) is INVALID: the server finished {server_requests} "
                f"requests (running peak {peak}) while it sent {sent}; its figures are left out"
            )
        self.windows.append(window)
        self.groups.append(group)
        return group

    async def _pool(self, jobs: list[Job], concurrency: int, label: str) -> None:
        """`concurrency` workers pull from one queue: exactly that many jobs in flight."""
        if not jobs:
            return
        task = self._progress.add_task(label, total=len(jobs)) if self._progress else None
        queue: asyncio.Queue[Job] = asyncio.Queue()
        for job in jobs:
            queue.put_nowait(job)

        async def worker() -> None:
            while not queue.empty():
                job = queue.get_nowait()
                await job()
                if task is not None:
                    self._progress.advance(task)

        with _gc_paused():
            await asyncio.gather(*(worker() for _ in range(min(concurrency, len(jobs)))))
        if task is not None:
            self._progress.remove_task(task)

    async def _open_loop(self, jobs: list[Job], schedule: list[float], label: str) -> None:
        """Each job starts at its scheduled offset whatever the others are doing (Poisson load)."""
        start = time.perf_counter()

        async def at(offset: float, job: Job) -> None:
            delay = start + offset - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if self._remaining() <= 0:
                self._time_bound_reached(label)
                return
            await job()

        with _gc_paused():
            await asyncio.gather(*(at(o, j) for o, j in zip(schedule, jobs, strict=False)))

    # --- one request ------------------------------------------------------------------------
    def job(self, spec: Spec) -> Job:
        async def run() -> None:
            if not self.out_of_time(spec.group):
                await self.send(spec)

        return run

    def out_of_time(self, group: str) -> bool:
        """Past the run's time bound: later requests are not sent (the run is incomplete)."""
        if self._remaining() > 0:
            return False
        self._time_bound_reached(group)
        return True

    async def send(
        self, spec: Spec, messages: list[dict[str, Any]] | None = None, prefix: str | None = None
    ) -> tuple[RequestRecord, ChatResult]:
        """One streamed request: a fresh unique prompt of spec.prompt_tokens, or `messages` (a
        conversation, whose unique opening the caller passes as `prefix`)."""
        if messages is None:
            prompt = self.prompts.make(spec.prompt_tokens, spec.group)
            messages, prefix, estimated = (
                [{"role": "user", "content": prompt.text}],
                prompt.prefix,
                prompt.estimated_tokens,
            )
        else:
            estimated = sum(estimate_tokens(str(m.get("content") or "")) for m in messages)
        timeout = max(1.0, min(self.method.request_timeout_s, self._remaining()))
        payload = chat_payload(self.method, self.model_id, messages, spec.max_tokens)
        result = await (self.stream or self._endpoint).chat(payload, timeout=timeout)
        record = request_record(spec, prefix or "", estimated, result, t0=self.t0, repeat=self.repeat)
        if timeout < self.method.request_timeout_s and (result.error or "").startswith("timed out"):
            # Its timeout was the run's remaining time, not request_timeout_s: the run's bound cut it.
            record.cut_by_time_bound = True
            record.error = (
                f"cut by the run's time bound (run_timeout_s {self.method.run_timeout_s:g} s): {result.error}"
            )
            self._time_bound_reached(spec.group)
        self._current.append(record)
        return record, result

    def _time_bound_reached(self, group: str) -> None:
        if self.complete:
            self.complete = False
            self.notes.append(
                f"the run's time bound ({self.method.run_timeout_s:g} s) was reached during {group}: "
                "a request in flight then is recorded as cut (not a server failure) and later "
                "requests were not sent"
            )

    async def _sample_metrics(self) -> None:
        """Peaks of the load gauges, read every metrics_interval_s while the phases run (a gauge
        read once after the run would only show an idle server); per phase and for the run."""
        scratch = ServerFacts()
        self._sampling = True
        while self._sampling:
            await asyncio.sleep(self.method.metrics_interval_s)
            metrics = await read_metrics(self._endpoint, scratch, timeout=5.0) or {}
            for name, key in PEAK_GAUGES.items():
                if name in metrics:
                    self.metric_peaks[key] = max(self.metric_peaks.get(key, 0.0), metrics[name])
                    self._phase_peak[name] = max(self._phase_peak.get(name, 0.0), metrics[name])

    # --- sizes --------------------------------------------------------------------------
    def cap_sizes(self, sizes: list[int], output_tokens: int, what: str) -> list[int]:
        """Prompt sizes capped by the server's context length and KV pool (minus a margin for the
        chat template), each noted; duplicates after capping are dropped."""
        limits = [
            x
            for x in (
                self.facts.context_length,
                self.facts.max_total_tokens,
                self.target.profile.model.context_length if self.target.profile else None,
            )
            if x
        ]
        if not limits:
            note = f"the server reported no context length: {what} sizes were not capped"
            if note not in self.notes:
                self.notes.append(note)
            return list(dict.fromkeys(sizes))
        room = min(limits)
        cap = int(room * (1 - _CONTEXT_MARGIN_FRACTION)) - _CONTEXT_MARGIN_TOKENS - output_tokens
        out: list[int] = []
        for size in sizes:
            if size > cap:
                note = f"{what} {size} tokens capped to {cap} by the context length ({room})"
                if note not in self.notes:
                    self.notes.append(note)
                size = cap
            if size >= 16 and size not in out:
                out.append(size)
        return out

    # --- helpers ------------------------------------------------------------------------
    def _note_once(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)

    def _now(self) -> float:
        return round(time.perf_counter() - self.t0, 6)

    def _remaining(self) -> float:
        return self.deadline - time.perf_counter()

    @contextmanager
    def _progress_bar(self) -> Iterator[None]:
        if not self.show_progress:
            yield
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(
            TextColumn("bench {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=terminal_text.console(stderr=True),
            transient=True,
        ) as bar:
            self._progress = bar
            try:
                yield
            finally:
                self._progress = None


@contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic collector paused while a group runs (as timeit does): every streamed chunk is a
    new dict, and collections scanning thousands of live ones cost the client a third of its CPU
    per token (benchmarks/client_overhead.py). Refcounting still frees what is dropped; one
    collection runs between groups, of the young generations: nothing was collected while the
    group ran, so everything it made is there, and its cycles are freed as a full collection
    frees them. A full collection also walks every object the process has kept since its
    imports (pandas, matplotlib, the CLI): 77 ms against 5 ms a group (20,000 dicts, 5,000 of
    them in cycles, all freed either way), over 3 s of CPU in a tune search of 40 groups. The
    older generation is left to the collector's own schedule, as between any other calls."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
            gc.collect(1)


def run_bench_sync(target: Target, method: BenchMethod, *, progress: bool = True) -> BenchRun:
    return asyncio.run(BenchRunner(target, method, progress=progress).run())
