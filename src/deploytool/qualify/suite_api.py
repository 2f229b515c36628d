"""The suite interface and the verdicts every suite returns.

A suite is a module or a package under `qualify/suites/` (a package keeps the helpers only that
suite uses beside it) with:

    name: str                                   # e.g. "tools"; also its key in the profile's qualify:
    Settings: type[SuiteSettings]               # pydantic model of its `qualify.<name>` section
    def applies_to(profile, server_info) -> str | None      # a skip reason, or None to run
    async def run(ctx: SuiteContext[Settings]) -> SuiteResult  # (a plain `def run` works too)

The runner builds the context (`qualify/context.py`: one HTTP client, the validated settings, the
captured server info, the item limit, a progress hook, `send` under the suite's concurrency
bound), bounds the run by the suite's budget and turns any exception into an `error` verdict, so
a suite only has to measure and judge. Transcripts of what was sent and answered are kept by
`qualify/transcripts.py`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from ..server.client import ChatResult
from ..server.facts import ServerFacts

if TYPE_CHECKING:
    from ..profiles import Profile
    from .context import SuiteContext


# not StrEnum: that would make str() and f-strings of a member "passed" instead of "Verdict.PASSED";
# text and JSON read .value (the same either way)
class Verdict(str, Enum):  # noqa: UP042
    PASSED = "passed"
    FAILED = "failed"  # the suite ran and a gate said no
    SKIPPED = "skipped"  # the suite does not apply (never counted as passed)
    ERROR = "error"  # the suite could not produce a verdict (unreachable, interrupted, a bug)


class SuiteSettings(BaseModel):
    """Base of every suite's settings: unknown keys are refused, so a typo in a profile's
    `qualify:` section is an error, not a silently ignored gate."""

    model_config = ConfigDict(extra="forbid")

    request_timeout_s: float = Field(default=300.0, gt=0, description="Budget of one request.")
    budget_s: float = Field(default=3600.0, gt=0, description="Budget of the whole suite.")
    # A misbehaving server ends the run quickly (qualify/resilience.py).
    idle_timeout_s: float = Field(
        default=60.0, gt=0, description="Longest wait for a byte, plus the prompt's allowance."
    )
    min_prefill_tps: float = Field(
        default=1000.0, gt=0, description="Prompt allowance: estimated tokens / this."
    )
    min_decode_tps: float = Field(
        default=10.0, gt=0, description="Non-streamed allowance: max_tokens / this."
    )
    max_consecutive_failures: int = Field(
        default=3, ge=1, description="Same-kind failures in a row before the rest is not sent."
    )


@dataclass
class Gate:
    """One pass/fail rule: `measured` compared with `threshold` by `comparison`."""

    name: str
    threshold: Any
    measured: Any
    passed: bool
    comparison: str = ">="  # ">=", "<=", "==", "all" (every item passed), "in"
    detail: str = ""
    unit: str = ""  # of measured and threshold, said with both ("%" for a regression)

    @classmethod
    def at_least(
        cls, name: str, measured: float | int | None, threshold: float | int, detail: str = ""
    ) -> Gate:
        ok = measured is not None and measured >= threshold
        return cls(
            name=name, threshold=threshold, measured=measured, passed=ok, comparison=">=", detail=detail
        )

    @classmethod
    def equal(cls, name: str, measured: Any, expected: Any, detail: str = "") -> Gate:
        return cls(
            name=name,
            threshold=expected,
            measured=measured,
            passed=measured == expected,
            comparison="==",
            detail=detail,
        )

    @classmethod
    def all_of(cls, name: str, passed: int, total: int, detail: str = "") -> Gate:
        """Every item must pass: measured is 'passed/total'."""
        return cls(
            name=name,
            threshold=f"{total}/{total}",
            measured=f"{passed}/{total}",
            passed=total > 0 and passed == total,
            comparison="all",
            detail=detail,
        )


@dataclass
class SuiteResult:
    name: str
    verdict: Verdict
    reason: str = ""  # why it failed / was skipped / errored, naming the cause
    figures: dict[str, Any] = field(default_factory=dict)
    gates: list[Gate] = field(default_factory=list)
    method: str = ""  # how the figures were measured, in words
    settings: dict[str, Any] = field(default_factory=dict)
    transcripts: list[dict[str, Any]] = field(default_factory=list)
    limited: bool = False  # --limit cut the suite's data
    duration_s: float = 0.0

    @property
    def passed(self) -> bool:
        return self.verdict is Verdict.PASSED

    @classmethod
    def skipped(cls, name: str, reason: str) -> SuiteResult:
        return cls(name=name, verdict=Verdict.SKIPPED, reason=reason)

    @classmethod
    def errored(cls, name: str, reason: str) -> SuiteResult:
        return cls(name=name, verdict=Verdict.ERROR, reason=reason)

    def judge(self, failures: list[str] | None = None) -> SuiteResult:
        """Set the verdict from the gates (and any extra failure notes): passed only when every
        gate passed and there is at least one gate. The reason names the failed gates."""
        failed = [g for g in self.gates if not g.passed]
        notes = list(failures or [])
        for gate in failed:
            text = f"{gate.name}: measured {gate.measured}{gate.unit}, needs {gate.comparison} {gate.threshold}{gate.unit}"
            notes.append(f"{text} ({gate.detail})" if gate.detail else text)
        if not self.gates:
            notes.append("no gate was evaluated")
        self.verdict = Verdict.FAILED if notes else Verdict.PASSED
        self.reason = "; ".join(notes)
        return self


@runtime_checkable
class Suite(Protocol):
    """What the runner takes a suite for: each module of qualify/suites/ is one (the registry
    checks it as it loads them)."""

    # read-only members: a suite module's own Settings (a subclass) then counts as a SuiteSettings
    @property
    def name(self) -> str: ...

    @property
    def Settings(self) -> type[SuiteSettings]: ...

    def applies_to(self, profile: Profile | None, server: ServerFacts) -> str | None: ...

    # Any: each suite's run takes the context of its own Settings (SuiteContext[Settings])
    def run(self, ctx: SuiteContext[Any]) -> SuiteResult | Awaitable[SuiteResult]: ...


def response_problems(result: ChatResult) -> list[str]:
    """Transport-level problems of one response (HTTP error, dropped stream, no finish)."""
    problems = []
    if result.error:
        problems.append(result.error)
    elif result.finish_reason is None:
        problems.append("no finish_reason in the response")
    return problems


def previous_suite(
    path: Path | None, suite_name: str, accept: Callable[[dict[str, Any]], bool]
) -> tuple[dict[str, Any] | None, str | None]:
    """The previous release's result of one suite from its results.json, when `accept` takes
    it; else (None, why not). (None, None) when there is no previous release to compare with."""
    if path is None:
        return None, None
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        return None, f"previous results {path} unreadable ({type(exc).__name__}: {exc})"
    for suite in data.get("suites") or []:
        if suite.get("name") == suite_name and accept(suite):
            return suite, None
    return None, f"previous results {path} have no usable {suite_name} result"
