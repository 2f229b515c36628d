"""The suite interface and the result objects every suite returns.

A suite is one module under `qualify/suites/` with:

    name: str                                   # e.g. "tools"; also its key in the profile's qualify:
    Settings: type[SuiteSettings]               # pydantic model of its `qualify.<name>` section
    def applies_to(profile, server_info) -> str | None      # a skip reason, or None to run
    async def run(ctx: SuiteContext) -> SuiteResult          # (a plain `def run` works too)

The runner builds the context (one HTTP client, the validated settings, the captured server
info, the item limit, a progress hook), bounds the run by the suite's budget and turns any
exception into an `error` verdict, so a suite only has to measure and judge.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

from pydantic import BaseModel, ConfigDict, Field

from ..server.client import ChatResult, EndpointClient
from ..server.facts import ServerFacts

if TYPE_CHECKING:
    from ..profiles import Profile
    from ..release.targets import Target

# A transcript string longer than this is cut in the report (a needle prompt is ~1 MB of text).
TRANSCRIPT_TEXT_LIMIT = 2000
# Passing cases keep only a few transcripts per suite; failures are always kept (up to this many).
MAX_PASS_TRANSCRIPTS = 3
MAX_FAIL_TRANSCRIPTS = 50


class Verdict(str, Enum):
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
    idle_timeout_s: float = Field(default=60.0, gt=0, description="Longest wait for a byte, plus the prompt's allowance.")
    min_prefill_tps: float = Field(default=1000.0, gt=0, description="Prompt allowance: estimated tokens / this.")
    min_decode_tps: float = Field(default=10.0, gt=0, description="Non-streamed allowance: max_tokens / this.")
    max_consecutive_failures: int = Field(default=3, ge=1, description="Same-kind failures in a row before the rest is not sent.")


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
    def at_least(cls, name: str, measured: float | int | None, threshold: float | int, detail: str = "") -> "Gate":
        ok = measured is not None and measured >= threshold
        return cls(name=name, threshold=threshold, measured=measured, passed=ok, comparison=">=", detail=detail)

    @classmethod
    def equal(cls, name: str, measured: Any, expected: Any, detail: str = "") -> "Gate":
        return cls(name=name, threshold=expected, measured=measured, passed=measured == expected,
                   comparison="==", detail=detail)

    @classmethod
    def all_of(cls, name: str, passed: int, total: int, detail: str = "") -> "Gate":
        """Every item must pass: measured is 'passed/total'."""
        return cls(name=name, threshold=f"{total}/{total}", measured=f"{passed}/{total}",
                   passed=total > 0 and passed == total, comparison="all", detail=detail)


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
    def skipped(cls, name: str, reason: str) -> "SuiteResult":
        return cls(name=name, verdict=Verdict.SKIPPED, reason=reason)

    @classmethod
    def errored(cls, name: str, reason: str) -> "SuiteResult":
        return cls(name=name, verdict=Verdict.ERROR, reason=reason)

    def judge(self, failures: list[str] | None = None) -> "SuiteResult":
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


@dataclass
class SuiteContext:
    client: EndpointClient
    settings: Any  # the suite's Settings instance
    server: ServerFacts
    profile: "Profile | None"
    target: "Target | None"
    limit: int | None = None
    previous_results: Path | None = None
    progress: Callable[[int | None, int | None], None] = lambda advance, total: None
    _started: float = field(default_factory=time.monotonic)

    def advance(self, n: int = 1) -> None:
        self.progress(n, None)

    def set_total(self, total: int) -> None:
        self.progress(None, total)

    @property
    def context_length(self) -> int | None:
        """The served context length: the server's word first, then the profile's."""
        measured = self.server.max_model_len
        if measured:
            return measured
        return self.profile.model.context_length if self.profile else None

    def apply_limit(self, items: list[Any]) -> tuple[list[Any], bool]:
        if self.limit is not None and self.limit < len(items):
            return items[: self.limit], True
        return items, False


class Suite(Protocol):
    name: str
    Settings: type[SuiteSettings]

    def applies_to(self, profile: "Profile | None", server: ServerFacts) -> str | None: ...

    def run(self, ctx: SuiteContext) -> Any: ...  # SuiteResult, or an awaitable of one


# --- transcripts ----------------------------------------------------------------------------

def clip(value: Any, limit: int = TRANSCRIPT_TEXT_LIMIT) -> Any:
    """Cut long strings (anywhere in a JSON-like value) so a report stays readable."""
    if isinstance(value, str):
        if len(value) <= limit:
            return value
        return value[: limit // 2] + f" …[{len(value) - limit} characters cut]… " + value[-limit // 2:]
    if isinstance(value, dict):
        return {k: clip(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [clip(v, limit) for v in value]
    return value


def request_summary(payload: dict[str, Any]) -> dict[str, Any]:
    """The request as sent, with images replaced by their size and tool schemas by their names."""
    def part(p: Any) -> Any:
        if isinstance(p, dict) and p.get("type") == "image_url":
            url = (p.get("image_url") or {}).get("url", "")
            return {"type": "image_url", "url": f"{url[:40]}… ({len(url)} characters)"}
        return p

    messages = []
    for m in payload.get("messages", []):
        m = dict(m)
        if isinstance(m.get("content"), list):
            m["content"] = [part(p) for p in m["content"]]
        messages.append(m)
    out = {k: v for k, v in payload.items() if k not in ("messages", "tools")}
    out["messages"] = messages
    if payload.get("tools"):
        out["tools"] = [t.get("function", {}).get("name") for t in payload["tools"]]
    return clip(out)


def transcript(case: str, payload: dict[str, Any] | None, result: ChatResult | None, *,
               passed: bool, problems: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "case": case,
        "passed": passed,
        "problems": list(problems or []),
        "request": request_summary(payload) if payload is not None else None,
        "response": clip(result.summary()) if result is not None else None,
        **clip(extra),
    }


class TranscriptLog:
    """Keeps every failure (up to a cap) and the first few passes."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self._passes = 0
        self._fails = 0

    def add(self, item: dict[str, Any]) -> None:
        if item.get("passed"):
            self._passes += 1
            if self._passes <= MAX_PASS_TRANSCRIPTS:
                self.items.append(item)
        else:
            self._fails += 1
            if self._fails <= MAX_FAIL_TRANSCRIPTS:
                self.items.append(item)


def chat_payload(ctx: SuiteContext, messages: list[dict[str, Any]], *, thinking: bool | None = None,
                 stream: bool = False, max_tokens: int | None = None, temperature: float = 0.0,
                 **extra: Any) -> dict[str, Any]:
    """A chat request as the gateway sends it: the served model name, greedy unless told,
    thinking set explicitly through chat_template_kwargs (None: the server's default)."""
    payload: dict[str, Any] = {
        "model": ctx.server.served_model_name or (ctx.profile.model.served_name if ctx.profile else "default"),
        "messages": messages,
        "temperature": temperature,
        "stream": stream,
    }
    if stream:
        payload["stream_options"] = {"include_usage": True}
    if max_tokens is not None:
        payload["max_tokens"] = max_tokens
    if thinking is not None:
        payload["chat_template_kwargs"] = {"enable_thinking": thinking}
    payload.update(extra)
    return payload


def response_problems(result: ChatResult) -> list[str]:
    """Transport-level problems of one response (HTTP error, dropped stream, no finish)."""
    problems = []
    if result.error:
        problems.append(result.error)
    elif result.finish_reason is None:
        problems.append("no finish_reason in the response")
    return problems


def previous_suite(path: Path | None, suite_name: str,
                   accept: Callable[[dict[str, Any]], bool]) -> tuple[dict[str, Any] | None, str | None]:
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
