"""What a workload and the run's assembly see of the runner: a Protocol, so the workloads
(which the runner loads by name) and assemble.py never import the runner itself."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..checks.targets import Target
from ..server import metrics_window as mw
from ..server.chat_result import ChatResult
from ..server.facts import ServerFacts
from .method import BenchMethod
from .prompts import PromptFactory
from .results import Figure, GroupSummary, RequestRecord
from .spec import Job, Spec


class BenchContext(Protocol):
    # the run's inputs
    target: Target
    method: BenchMethod
    settings: Any  # the workload's own Settings (a pydantic model)
    seed: int
    prompts: PromptFactory
    # what the server said about itself before and after the run
    facts: ServerFacts
    after: ServerFacts
    # what the run has measured so far
    repeat: int
    records: list[RequestRecord]
    groups: list[GroupSummary]
    windows: list[mw.Window]
    pass_figures: list[list[Figure]]
    metric_peaks: dict[str, float]
    notes: list[str]
    details: dict[str, Any]
    invalid_groups: list[str]
    complete: bool
    started_at: str
    t0: float

    @property
    def gpus(self) -> int: ...

    async def measure(
        self,
        name: str,
        phase: str,
        concurrency: int,
        make_jobs: Callable[[], list[Job]],
        *,
        schedule: list[float] | None = None,
    ) -> GroupSummary: ...

    def job(self, spec: Spec) -> Job: ...

    async def send(
        self, spec: Spec, messages: list[dict[str, Any]] | None = None, prefix: str | None = None
    ) -> tuple[RequestRecord, ChatResult]: ...

    def out_of_time(self, group: str) -> bool: ...

    def cap_sizes(self, sizes: list[int], output_tokens: int, what: str) -> list[int]: ...
