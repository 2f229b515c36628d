"""One admitted request's run through the engine: the queue, prefill, the paced tokens, and the
accounting the /metrics counters and the usage block report."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from deploytool.sim.engine import Engine
from deploytool.sim.generation import Plan, Unit
from deploytool.sim.request import ChatRequest


class Generation:
    """One admitted request's run through the engine: queue, prefill, paced tokens, accounting."""

    def __init__(self, engine: Engine, req: ChatRequest, plan: Plan, started: float) -> None:
        self.engine, self.req, self.plan, self.started = engine, req, plan, started
        self.cached_tokens = 0
        self.settings = engine.settings

    async def units(self) -> AsyncIterator[Unit]:
        engine = self.engine
        slot = await engine.admit(self.req.prompt_tokens)
        complete = False
        try:
            self.cached_tokens, prefill_s = engine.prefill(self.req.prompt_key, self.req.prompt_tokens)
            forced = int(self.req.prompt_tokens * self.settings.cached_prompt_fraction)  # the test option
            self.cached_tokens = min(self.req.prompt_tokens - 1, max(self.cached_tokens, forced))
            prefill_s += engine.settings.schedule_latency_s
            async for unit in engine.pace(slot, self.plan.units, prefill_s, self.started):
                yield unit
            complete = True
            if not self.plan.tool_calls:
                # The conversation a multi-turn client sends next: this prompt plus this answer.
                engine.remember_turn(
                    f"{self.req.prompt_key}\n<|assistant|>{self.plan.text_of('content') or ''}"
                )
        finally:
            engine.release(slot)
            stats = engine.stats
            if complete:
                stats.prompt_tokens += self.req.prompt_tokens
                stats.cached_tokens += self.cached_tokens
                stats.count_request(
                    self.req.stream, self.req.prompt_tokens, slot.generated, self.settings.spec_accept_length
                )
                stats.requests += 1
                stats.e2e.observe(time.monotonic() - self.started)
                if slot.first_token_at is not None and slot.generated > 1:
                    # SGLang's per-request TPOT: (finished - first token) / (completion tokens - 1)
                    stats.tpot.observe((time.monotonic() - slot.first_token_at) / (slot.generated - 1))
            elif not self.req.stream:
                # A request whose client left is in no token or request counter: SGLang counts a
                # request in observe_one_finished_request only when its finished output still
                # has a state (tokenizer_manager.py collect_metrics), and an abort drops it. Only
                # a non-streamed request's abort counts in num_aborted_requests_total: a stream's
                # abort finds the state gone and returns before counting (abort_request). Seen
                # on a real 0.5.17 server (tests/data/sglang-real/dense/abort_stream_client_leaves.json).
                stats.aborted += 1

    def usage(self) -> dict[str, Any]:
        """UsageProcessor.calculate_token_usage (sglang/srt/entrypoints/openai/usage_processor.py):
        prompt_tokens_details only with --enable-cache-report; completion_tokens_details only
        when there are reasoning tokens."""
        completion = self.plan.completion_tokens
        reasoning = self.plan.reasoning_tokens
        return {
            "prompt_tokens": self.req.prompt_tokens,
            "total_tokens": self.req.prompt_tokens + completion,
            "completion_tokens": completion,
            "prompt_tokens_details": (
                {"cached_tokens": self.cached_tokens} if self.settings.enable_cache_report else None
            ),
            "reasoning_tokens": reasoning,
            "completion_tokens_details": {"reasoning_tokens": reasoning} if reasoning else None,
        }
