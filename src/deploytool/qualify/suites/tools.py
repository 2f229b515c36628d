"""tools: tool calling in the spirit of BFCL's categories (simple, multiple, parallel,
irrelevance) plus a two-turn round trip that feeds a tool result back.

Every case runs non-streamed and streamed, thinking off and on. Each call is checked against
the schema that was offered (name, required parameters present, no unknown parameters, types
and enum values: qualify/toolcheck.py) and against the values the prompt quoted. A streamed
response is assembled from its deltas per `index` and must equal the non-streamed one, carry
one id per call and end with finish_reason "tool_calls".
"""

from __future__ import annotations

import asyncio
from typing import Any

import yaml
from pydantic import Field

from ...client import ChatResult
from ...resources import resource
from ..base import (Gate, ServerInfo, SuiteContext, SuiteResult, SuiteSettings, TranscriptLog, Verdict,
                    chat_payload, response_problems, transcript)
from ..scoring import missing_keyword_groups
from ..toolcheck import ExpectedCall, canonical_calls, check_call, match_expected, stream_problems

name = "tools"
CATEGORIES = ("simple", "multiple", "parallel", "irrelevance", "round-trip")


class Settings(SuiteSettings):
    max_tokens: int = Field(default=1024, ge=16, description="Room for thinking before the call.")
    concurrency: int = Field(default=8, ge=1)
    thinking: list[bool] = Field(default=[False, True], min_length=1, description="Thinking modes to run.")
    cases_file: str = Field(default="tools.yaml", description="Under the project's qualify/ folder.")
    request_timeout_s: float = 180.0


def applies_to(profile: Any, server: ServerInfo) -> str | None:
    if profile is not None and not profile.model.tools:
        return f"profile {profile.name!r} says the model does not call tools (model.tools: false)"
    return None


def load_cases(file: str = "tools.yaml") -> tuple[dict[str, Any], list[dict[str, Any]]]:
    data = yaml.safe_load(resource("qualify", file).read_text())
    cases = list(data.get("cases") or []) + list(data.get("round_trips") or [])
    for case in cases:
        unknown = [t for t in case["offer"] if t not in data["tools"]]
        if unknown:
            raise ValueError(f"qualify/{file}: case {case['id']} offers unknown tool(s) {unknown}")
    return data["tools"], cases


def _tool_list(tools: dict[str, Any], names: list[str]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": n, **tools[n]}} for n in names]


def check_tool_response(res: ChatResult, expected: list[ExpectedCall], schemas: dict[str, Any]) -> list[str]:
    """Problems with one response to a tool prompt; empty when it is right."""
    problems = response_problems(res)
    if res.error:
        return problems
    if expected:
        if res.finish_reason != "tool_calls":
            problems.append(f"finish_reason is {res.finish_reason!r}, expected 'tool_calls'")
        for call in res.tool_calls:
            problems.extend(check_call(call, schemas))
        problems.extend(match_expected(res.tool_calls, expected))
        if not res.tool_calls and "<tool_call>" in res.content:
            problems.append("the call came back as raw <tool_call> text in content: is --tool-call-parser set?")
    else:
        if res.tool_calls:
            problems.append(f"called {', '.join(str(c.name) for c in res.tool_calls)} although no tool applies")
        if not res.content.strip():
            problems.append("no tool call expected, but the answer is empty")
    if res.streamed:
        problems.extend(stream_problems(res.tool_calls))
    return problems


async def run(ctx: SuiteContext) -> SuiteResult:
    s: Settings = ctx.settings
    tools, all_cases = load_cases(s.cases_file)
    cases, limited = ctx.apply_limit(all_cases)
    ctx.set_total(len(cases) * len(s.thinking))
    semaphore = asyncio.Semaphore(s.concurrency)
    log = TranscriptLog()
    rows: list[dict[str, Any]] = []

    async def send(payload: dict[str, Any]) -> ChatResult:
        async with semaphore:
            return await ctx.client.chat(payload)

    async def one(case: dict[str, Any], thinking: bool) -> None:
        schemas = {n: tools[n].get("parameters") or {} for n in case["offer"]}
        expected = [ExpectedCall(e["name"], e.get("arguments") or {}) for e in case.get("expect") or []]
        messages = [{"role": "user", "content": case["prompt"]}]
        by_mode: dict[bool, ChatResult] = {}
        for stream in (False, True):
            payload: dict[str, Any] | None = None
            res: ChatResult | None = None
            try:
                payload = chat_payload(ctx, messages, thinking=thinking, stream=stream, max_tokens=s.max_tokens,
                                       tools=_tool_list(tools, case["offer"]), tool_choice="auto")
                res = await send(payload)
                by_mode[stream] = res
                problems = check_tool_response(res, expected, schemas)
                plain = by_mode.get(False)
                if stream and not res.error and plain is not None and not plain.error:
                    if canonical_calls(res.tool_calls) != canonical_calls(plain.tool_calls):
                        problems.append(f"streamed calls {canonical_calls(res.tool_calls)} differ from non-streamed "
                                        f"{canonical_calls(plain.tool_calls)}")
                if "tool_result" in case and not problems:
                    problems += await _second_turn(case, res, thinking, stream, tools, log)
            except Exception as exc:  # an unexpected answer or a bug: this run fails, the suite goes on
                problems = [f"checking this case raised {type(exc).__name__}: {exc}"]
            label = f"{case['id']} {'stream' if stream else 'non-stream'} thinking-{'on' if thinking else 'off'}"
            rows.append({"case": case["id"], "category": case["category"], "stream": stream, "thinking": thinking,
                         "passed": not problems, "problem": problems[0] if problems else ""})
            log.add(transcript(label, payload, res, passed=not problems, problems=problems))
        ctx.advance()

    async def _second_turn(case: dict[str, Any], first: ChatResult, thinking: bool, stream: bool,
                           tools_: dict[str, Any], log_: TranscriptLog) -> list[str]:
        call = first.tool_calls[0]
        messages = [
            {"role": "user", "content": case["prompt"]},
            {"role": "assistant", "content": first.content or None, "tool_calls": [
                {"id": call.id or "call_0", "type": "function",
                 "function": {"name": call.name, "arguments": call.arguments}}]},
            {"role": "tool", "tool_call_id": call.id or "call_0", "content": case["tool_result"]},
        ]
        payload = chat_payload(ctx, messages, thinking=thinking, stream=stream, max_tokens=s.max_tokens,
                               tools=_tool_list(tools_, case["offer"]), tool_choice="auto")
        res = await send(payload)
        problems = response_problems(res)
        if not res.error:
            if res.tool_calls:
                problems.append(f"second turn called {res.tool_calls[0].name} again instead of answering")
            missing = missing_keyword_groups(res.content, case.get("answer_expect") or [])
            if missing:
                problems.append(f"second turn answer does not use the tool result (lacks "
                                f"{' and '.join('one of ' + repr(g) for g in missing)}): {res.content[:160]!r}")
        label = f"{case['id']} turn 2 {'stream' if stream else 'non-stream'} thinking-{'on' if thinking else 'off'}"
        log_.add(transcript(label, payload, res, passed=not problems, problems=problems))
        return [f"turn 2: {p}" for p in problems]

    await asyncio.gather(*(one(c, t) for c in cases for t in s.thinking))

    result = SuiteResult(name=name, verdict=Verdict.ERROR, limited=limited)
    by_category: dict[str, dict[str, int]] = {}
    for row in rows:
        tally = by_category.setdefault(row["category"], {"passed": 0, "total": 0})
        tally["total"] += 1
        tally["passed"] += row["passed"]
    for category in [c for c in CATEGORIES if c in by_category] + [c for c in by_category if c not in CATEGORIES]:
        tally = by_category[category]
        failed = sorted({f"{r['case']} ({r['problem']})" for r in rows if r["category"] == category and not r["passed"]})
        result.gates.append(Gate.all_of(f"{category} calls correct", tally["passed"], tally["total"],
                                        detail="; ".join(failed[:3])))
    result.figures = {
        "by_category": by_category,
        "by_mode": {f"{'stream' if st else 'non-stream'}/thinking-{'on' if th else 'off'}":
                    sum(r["passed"] for r in rows if r["stream"] == st and r["thinking"] == th)
                    for st in (False, True) for th in s.thinking},
        "runs": len(rows), "passed": sum(r["passed"] for r in rows), "cases": len(cases),
        "rows": sorted(rows, key=lambda r: (r["case"], r["thinking"], r["stream"])),
    }
    result.method = (
        f"{len(cases)} cases from qualify/{s.cases_file}, each sent non-streamed and streamed with thinking "
        f"{' and '.join('on' if t else 'off' for t in s.thinking)} (chat_template_kwargs.enable_thinking), "
        f"tool_choice auto, greedy, max_tokens {s.max_tokens}, {s.concurrency} in flight. Calls checked against "
        "the offered JSON schema (name, required, unknown, types, enums via jsonschema) and the quoted values; "
        "streamed deltas assembled per index and compared with the non-streamed calls."
        + (f" --limit {ctx.limit}." if limited else "")
    )
    result.transcripts = log.items
    return result.judge()
