"""Capacity and timing: the FIFO admission queue, the prefix cache, token pacing, and counters.

Timing rule (docs/sim.md, "Timing"): a request waits in FIFO order for a running
slot (--max-running-requests) and for room in the KV pool for its prompt; then
prefill takes uncached_prompt_tokens / prefill_tps; the first output token comes
at the end of prefill and each later one 1/speed after the previous, where
speed = min(decode_tps, aggregate_tps / running) x step_factor(running) / (1 + context / decode_slowdown_tokens)
(step_factor: the launch flags' rules, launch_rules.py; the last factor only with --decode-slowdown-tokens; context is the request's prompt plus
what it generated so far). Deadlines are absolute, so sleep overshoot does not accumulate.

A finished request's conversation (prompt plus the assistant turn it produced) enters the
prefix cache, as SGLang's radix cache keeps a finished request's output tokens
(managers/schedule_batch.py / mem_cache/radix_cache.py `cache_finished_req`), so a multi-turn
client that resends the conversation finds the previous turn cached.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field

from deploytool.sim import launch_rules
from deploytool.sim.generation import Unit
from deploytool.sim.settings import SimSettings
from deploytool.sim.tokens import count_tokens

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
E2E_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# SGLang 0.5.23's default buckets of the per-request TPOT histogram (bucket_inter_token_latency).
TPOT_BUCKETS = (
    0.002,
    0.004,
    0.006,
    0.008,
    0.010,
    0.015,
    0.020,
    0.025,
    0.030,
    0.035,
    0.040,
    0.060,
    0.080,
    0.100,
    0.200,
    0.400,
    0.600,
    0.800,
    1.000,
    2.000,
    4.000,
    6.000,
    8.000,
)


class PrefixCache:
    """LRU of chained block hashes over the serialized prompt, like a radix cache at block granularity.

    Block i's key hashes block i together with block i-1's key, so a key matches only if the
    whole prefix up to it matches. A prompt's cached part is its longest run of known blocks.
    """

    def __init__(self, block_chars: int, capacity: int) -> None:
        self.block_chars = block_chars
        self.capacity = capacity
        self._blocks: OrderedDict[bytes, None] = OrderedDict()

    def _keys(self, text: str) -> Iterable[bytes]:
        prev = b""
        for start in range(0, len(text) - self.block_chars + 1, self.block_chars):
            prev = hashlib.blake2b(
                prev + text[start : start + self.block_chars].encode(), digest_size=16
            ).digest()
            yield prev

    def lookup_and_insert(self, text: str) -> int:
        """Characters of ``text`` already cached; then remember all of its full blocks."""
        matched, matching = 0, True
        for key in self._keys(text):
            if matching and key in self._blocks:
                matched += self.block_chars
            else:
                matching = False
            self._blocks[key] = None
            self._blocks.move_to_end(key)
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)
        return matched

    def clear(self) -> None:
        self._blocks.clear()


@dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        self.n += 1
        self.total += value
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1


@dataclass
class Stats:
    prompt_tokens: int = 0
    generation_tokens: int = 0
    cached_tokens: int = 0
    requests: int = 0
    aborted: int = 0
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(E2E_BUCKETS))
    tpot: Histogram = field(default_factory=lambda: Histogram(TPOT_BUCKETS))
    _per_second: dict[int, int] = field(default_factory=dict)
    # Counters by is_streaming ("true"/"false"), as sglang:prompt_tokens_total and friends are
    # labelled (sglang/srt/observability/metrics_collector.py): {label: [prompt, generation, requests]}.
    by_stream: dict[str, list[int]] = field(default_factory=lambda: {"false": [0, 0, 0], "true": [0, 0, 0]})
    spec_verify_calls: int = 0

    def count_request(self, streaming: bool, prompt: int, generated: int, accept_length: float) -> None:
        row = self.by_stream["true" if streaming else "false"]
        row[0] += prompt
        row[1] += generated
        row[2] += 1
        if accept_length > 0 and generated:
            # each verify step accepts accept_length tokens on average: generated / calls = accept length
            self.spec_verify_calls += max(1, round(generated / accept_length))

    def add_generated(self, n: int) -> None:
        self.generation_tokens += n
        second = int(time.monotonic())
        self._per_second[second] = self._per_second.get(second, 0) + n
        if len(self._per_second) > 16:
            for old in sorted(self._per_second)[:-8]:
                del self._per_second[old]

    def gen_throughput(self, window: int = 5) -> float:
        """Output tokens/s over the last ``window`` whole seconds."""
        now = int(time.monotonic())
        return sum(self._per_second.get(s, 0) for s in range(now - window, now)) / window


@dataclass(eq=False)  # identity: two requests with equal counts are still two slots
class Slot:
    prompt_tokens: int
    generated: int = 0
    first_token_at: float | None = None  # time.monotonic() of the first token, for the request's TPOT


class Engine:
    """Shared state of one server: admission, cache, counters. Lives on the server's event loop."""

    def __init__(self, settings: SimSettings) -> None:
        self.settings = settings
        self.cache = PrefixCache(settings.prefix_cache_block_chars, settings.prefix_cache_blocks)
        self.stats = Stats()
        self.running: list[Slot] = []
        self._waiters: deque[object] = deque()
        self._cond: asyncio.Condition | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def queued(self) -> int:
        return len(self._waiters)

    @property
    def kv_used(self) -> int:
        return sum(s.prompt_tokens + s.generated for s in self.running)

    def token_usage(self) -> float:
        return min(1.0, self.kv_used / self.settings.max_total_tokens)

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:  # created lazily, on the loop that serves requests
            self._cond = asyncio.Condition()
        return self._cond

    def _can_start(self, ticket: object, need: int) -> bool:
        reserved = sum(s.prompt_tokens for s in self.running)
        return (
            self._waiters[0] is ticket
            and len(self.running) < self.settings.max_running_requests
            and reserved + need <= self.settings.max_total_tokens
        )

    async def admit(self, prompt_tokens: int) -> Slot:
        """Wait, first come first served, for a running slot and KV room for the prompt."""
        cond = self._condition()
        ticket = object()
        async with cond:
            self._waiters.append(ticket)
            try:
                await cond.wait_for(lambda: self._can_start(ticket, prompt_tokens))
            except BaseException:
                self._waiters.remove(ticket)
                cond.notify_all()
                raise
            self._waiters.popleft()
            slot = Slot(prompt_tokens)
            self.running.append(slot)
            cond.notify_all()
            return slot

    def release(self, slot: Slot) -> None:
        """Free the slot. Synchronous so it is safe in a finally block of a cancelled stream."""
        if slot in self.running:
            self.running.remove(slot)
        task = asyncio.get_running_loop().create_task(self._wake())
        self._tasks.add(task)  # keep a reference until done: the loop holds tasks weakly
        task.add_done_callback(self._tasks.discard)

    async def _wake(self) -> None:
        cond = self._condition()
        async with cond:
            cond.notify_all()

    def speed(self, slot: Slot | None = None) -> float:
        """Per-request decode tokens/s now: aggregate_tps is shared by the running requests, the
        launch flags' rules scale it (graphs, speculative decoding), and a long context slows
        each step (--decode-slowdown-tokens)."""
        tps = self.settings.decode_tps
        if self.settings.aggregate_tps:
            tps = min(tps, self.settings.aggregate_tps / max(1, len(self.running)))
        # graphs and speculative decoding answer to the batch size (launch_rules.py)
        tps *= launch_rules.step_factor(self.settings, max(1, len(self.running)))
        halving = self.settings.decode_slowdown_tokens
        if halving and slot is not None:
            tps /= 1.0 + (slot.prompt_tokens + slot.generated) / halving
        return tps

    def remember_turn(self, conversation_key: str) -> None:
        """Cache a finished request's prompt plus its answer (the next turn's prefix)."""
        self.cache.lookup_and_insert(conversation_key)

    def prefill(self, prompt_key: str, prompt_tokens: int) -> tuple[int, float]:
        """Cached prompt tokens (prefix cache) and the prefill seconds for the rest."""
        matched_chars = self.cache.lookup_and_insert(prompt_key)
        cached = min(prompt_tokens - 1, count_tokens(prompt_key[:matched_chars])) if matched_chars else 0
        cached = max(0, cached)
        return cached, (prompt_tokens - cached) / self.settings.prefill_tps

    async def pace(
        self, slot: Slot, units: list[Unit], prefill_seconds: float, started: float
    ) -> AsyncIterator[Unit]:
        """Yield units at their deadlines: first at the end of prefill, then 1/speed per token."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + prefill_seconds
        for i, unit in enumerate(units):
            # token 0 comes with prefill; every later token is one decode step after the previous
            steps = unit.cost - 1 if i == 0 else unit.cost
            for _ in range(steps):
                deadline += 1.0 / self.speed(slot)
            delay = deadline - loop.time()
            if delay > 0.0005:
                await asyncio.sleep(delay)
            elif i % 64 == 63:
                await asyncio.sleep(0)  # let other requests run when the schedule is behind
            if i == 0:
                slot.first_token_at = time.monotonic()
                self.stats.ttft.observe(slot.first_token_at - started)
                # decode steps count from when the first token actually went out: a first token
                # sent late (a busy event loop) must not make the next ones come in a burst
                deadline = max(deadline, loop.time())
            slot.generated += unit.cost
            self.stats.add_generated(unit.cost)
            yield unit
        if not units:
            delay = deadline - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
