"""tools: tool calling as BFCL's categories and SGLang's own function-call tests probe it:
simple, multiple (choose one), parallel (one function twice, and different functions),
irrelevance (no call), tool_choice (required: a call must happen; none: none may; a named
function: that one), nested object and array arguments, a long (>= 2 KB) string argument that
must arrive intact and, streamed, in more than one fragment, a round trip, and a conversation
of several turns that feeds every tool result back.

Every case runs non-streamed and streamed, thinking off and on. Each call is checked against
the schema that was offered (name, required parameters present, no unknown parameters, types
and enum values: qualify/suites/tools/toolcheck.py) and against the values the prompt quoted. A streamed
response is assembled from its deltas per `index` and must equal the non-streamed one, carry
one id per call and end with finish_reason "tool_calls". No parser markup (`<tool_call>`,
`<function=`, `</parameter>`...) may leak into `content` or `reasoning_content`.
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import yaml
from pydantic import Field

from ....resources import resource
from ....server.client import ChatResult
from ....server.facts import ServerFacts
from ...context import SuiteContext, chat_payload
from ...prose import sentences as prose_sentences
from ...scoring import lacking, missing_keyword_groups
from ...suite_api import Gate, SuiteResult, SuiteSettings, Verdict, response_problems
from ...transcripts import TranscriptLog, transcript
from .toolcheck import ExpectedCall, canonical_calls, check_call, match_expected, stream_problems

name = "tools"
CATEGORIES = (
    "simple",
    "multiple",
    "parallel",
    "irrelevance",
    "tool_choice",
    "nested",
    "long-argument",
    "round-trip",
    "multi-turn",
)
# What SGLang's tool-call parsers consume (qwen25/hermes <tool_call>, qwen3_coder <function=...>
# <parameter=...>): none of it may reach the client as text once a parser is configured.
MARKUP = ("<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=", "</parameter>")
LONG_TEXT_SEED = 2024


class Settings(SuiteSettings):
    max_tokens: int = Field(default=2048, ge=16, description="Room for thinking and a long argument.")
    concurrency: int = Field(default=8, ge=1)
    thinking: list[bool] = Field(default=[False, True], min_length=1, description="Thinking modes to run.")
    cases_file: str = Field(default="tools.yaml", description="Under the project's qualify/ folder.")
    request_timeout_s: float = 180.0


def applies_to(profile: Any, server: ServerFacts) -> str | None:
    if profile is not None and not profile.model.tools:
        return f"profile {profile.name!r} says the model does not call tools (model.tools: false)"
    return None


def long_text(chars: int) -> str:
    """Generated prose of at least `chars` characters, without quotes (it is quoted in a prompt)."""
    text, n = "", 8
    while len(text) < chars:
        n *= 2
        text = " ".join(prose_sentences(n, LONG_TEXT_SEED))
    return text[: text.find(".", chars) + 1] or text


def _fill(value: Any, text: str) -> Any:
    if isinstance(value, str):
        return value.replace("{long_text}", text)
    if isinstance(value, dict):
        return {k: _fill(v, text) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, text) for v in value]
    return value


def load_cases(file: str = "tools.yaml") -> tuple[dict[str, Any], list[dict[str, Any]]]:
    data = yaml.safe_load(resource("qualify", file).read_text())
    cases = (
        list(data.get("cases") or [])
        + list(data.get("round_trips") or [])
        + list(data.get("conversations") or [])
    )
    for case in cases:
        unknown = [t for t in case["offer"] if t not in data["tools"]]
        if unknown:
            raise ValueError(f"qualify/{file}: case {case['id']} offers unknown tool(s) {unknown}")
        if "long_text_chars" in case:
            case.update(
                _fill(
                    copy.deepcopy({k: v for k, v in case.items() if k in ("prompt", "expect")}),
                    long_text(int(case["long_text_chars"])),
                )
            )
    return data["tools"], cases


def _tool_list(tools: dict[str, Any], names: list[str]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": n, **tools[n]}} for n in names]


def markup_problems(res: ChatResult) -> list[str]:
    problems = []
    for field, text in (("content", res.content), ("reasoning_content", res.reasoning_content)):
        leaked = [m for m in MARKUP if m in (text or "")]
        if leaked:
            problems.append(
                f"parser markup {leaked} leaked into {field}: is --tool-call-parser set? "
                f"{(text or '')[:120]!r}"
            )
    return problems


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
    else:
        if res.tool_calls:
            problems.append(
                f"called {', '.join(str(c.name) for c in res.tool_calls)} although no call may be made"
            )
        if not res.content.strip():
            problems.append("no tool call expected, but the answer is empty")
    problems.extend(markup_problems(res))
    if res.streamed:
        problems.extend(stream_problems(res.tool_calls))
    return problems


def argument_fragments(res: ChatResult) -> dict[int, int]:
    """Streamed: how many deltas carried each call's arguments (needs the kept chunks)."""
    counts: dict[int, int] = {}
    for chunk in res.raw or []:
        for choice in chunk.get("choices") or []:
            for piece in (choice.get("delta") or {}).get("tool_calls") or []:
                if (piece.get("function") or {}).get("arguments"):
                    counts[piece.get("index", 0)] = counts.get(piece.get("index", 0), 0) + 1
    return counts


def _expected(items: list[dict[str, Any]] | None) -> list[ExpectedCall]:
    return [ExpectedCall(e["name"], e.get("arguments") or {}) for e in items or []]


def _mode(stream: bool, thinking: bool) -> str:
    return f"{'stream' if stream else 'non-stream'} thinking-{'on' if thinking else 'off'}"


async def run(ctx: SuiteContext[Settings]) -> SuiteResult:
    s = ctx.settings
    tools, all_cases = load_cases(s.cases_file)
    cases, limited = ctx.apply_limit(all_cases)
    ctx.set_total(len(cases) * len(s.thinking))
    checks = _ToolRun(ctx, tools)
    await asyncio.gather(*(checks.case(c, t) for c in cases for t in s.thinking))
    rows = checks.rows
    result = SuiteResult(name=name, verdict=Verdict.ERROR, limited=limited)
    result.gates, by_category = _category_gates(rows)
    result.figures = {
        "by_category": by_category,
        "by_mode": {
            _mode(st, th): sum(r["passed"] for r in rows if r["stream"] == st and r["thinking"] == th)
            for st in (False, True)
            for th in s.thinking
        },
        "runs": len(rows),
        "passed": sum(r["passed"] for r in rows),
        "cases": len(cases),
        "rows": sorted(rows, key=lambda r: (r["case"], r["thinking"], r["stream"])),
    }
    result.method = (
        f"{len(cases)} cases from qualify/{s.cases_file}, each sent non-streamed and streamed with thinking "
        f"{' and '.join('on' if t else 'off' for t in s.thinking)} (chat_template_kwargs.enable_thinking), "
        f"tool_choice as the case says (auto unless required, none or a named function), greedy, max_tokens "
        f"{s.max_tokens}, {s.concurrency} in flight. Calls checked against the offered JSON schema (name, required, "
        "unknown, types, enums via jsonschema) and the quoted values (nested objects and arrays compared whole); "
        "streamed deltas assembled per index and compared with the non-streamed calls; the long argument must "
        "come back character for character and stream in more than one fragment; tool results are fed back as "
        f"tool messages turn after turn; no parser markup {list(MARKUP)} may appear in content or reasoning_content."
        + (f" --limit {ctx.limit}." if limited else "")
    )
    result.transcripts = checks.log.items
    return result.judge()


class _ToolRun:
    """The suite's requests: each case non-streamed then streamed, turn by turn, under one bound
    on the requests in flight; every request's transcript in one log and a row per case and mode."""

    def __init__(self, ctx: SuiteContext[Settings], tools: dict[str, Any]) -> None:
        self.ctx, self.tools = ctx, tools
        self.s = ctx.settings
        self.log = TranscriptLog()
        self.rows: list[dict[str, Any]] = []

    async def send(self, payload: dict[str, Any], keep: bool = False) -> ChatResult:
        return await self.ctx.send(payload, keep_chunks=keep or None)

    def payload_for(
        self, case: dict[str, Any], messages: list[dict[str, Any]], thinking: bool, stream: bool
    ) -> dict[str, Any]:
        return chat_payload(
            self.ctx,
            messages,
            thinking=thinking,
            stream=stream,
            max_tokens=self.s.max_tokens,
            tools=_tool_list(self.tools, case["offer"]),
            tool_choice=case.get("tool_choice", "auto"),
        )

    async def case(self, case: dict[str, Any], thinking: bool) -> None:
        steps = case.get("turns") or [case]
        first: dict[int, ChatResult | None] = {}  # turn -> the non-streamed result, to compare with
        for stream in (False, True):
            problems: list[str] = []
            messages: list[dict[str, Any]] = []
            try:
                for k, step in enumerate(steps):
                    messages.append({"role": "user", "content": step["prompt"]})
                    label = (
                        f"{case['id']}{f' turn {k + 1}' if len(steps) > 1 else ''} {_mode(stream, thinking)}"
                    )
                    res, found = await self.turn(case, step, messages, thinking, stream, label, first.get(k))
                    if not stream:
                        first[k] = res
                    if found:
                        problems += [f"turn {k + 1}: {p}" if len(steps) > 1 else p for p in found]
                        break
            except Exception as exc:  # an unexpected answer or a bug: this run fails, the suite goes on
                problems = [f"checking this case raised {type(exc).__name__}: {exc}"]
                self.log.add(
                    transcript(
                        f"{case['id']} {_mode(stream, thinking)}", None, None, passed=False, problems=problems
                    )
                )
            self.rows.append(
                {
                    "case": case["id"],
                    "category": case["category"],
                    "stream": stream,
                    "thinking": thinking,
                    "passed": not problems,
                    "problem": problems[0] if problems else "",
                }
            )
        self.ctx.advance()

    async def turn(
        self,
        case: dict[str, Any],
        step: dict[str, Any],
        messages: list[dict[str, Any]],
        thinking: bool,
        stream: bool,
        label: str,
        plain: ChatResult | None,
    ) -> tuple[ChatResult | None, list[str]]:
        """One user turn: the call(s), then (with a tool_result) the answer that uses it."""
        schemas = {n: self.tools[n].get("parameters") or {} for n in case["offer"]}
        payload = self.payload_for(case, messages, thinking, stream)
        long = stream and "long_text_chars" in case
        res = await self.send(payload, keep=long)
        problems = check_tool_response(res, _expected(step.get("expect")), schemas)
        if (
            stream
            and not res.error
            and plain is not None
            and not plain.error
            and canonical_calls(res.tool_calls) != canonical_calls(plain.tool_calls)
        ):
            problems.append(
                f"streamed calls {_short(canonical_calls(res.tool_calls))} differ from non-streamed "
                f"{_short(canonical_calls(plain.tool_calls))}"
            )
        if long and not res.error:
            fragments = argument_fragments(res)
            if any(count < 2 for count in fragments.values()) or not fragments:
                problems.append(
                    f"the long argument was streamed in {fragments or 'no'} fragment(s) per call; "
                    "expected more than one"
                )
        self.log.add(transcript(label, payload, res, passed=not problems, problems=problems))
        if problems or "tool_result" not in step:
            return res, problems
        return res, await self.answer_with_result(case, step, messages, res, thinking, stream, label)

    async def answer_with_result(
        self,
        case: dict[str, Any],
        step: dict[str, Any],
        messages: list[dict[str, Any]],
        res: ChatResult,
        thinking: bool,
        stream: bool,
        label: str,
    ) -> list[str]:
        """The calls and the step's tool_result go back; the answer must use the result, not call again."""
        calls = res.tool_calls
        messages.append(
            {
                "role": "assistant",
                "content": res.content or None,
                "tool_calls": [
                    {
                        "id": c.id or f"call_{i}",
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    }
                    for i, c in enumerate(calls)
                ],
            }
        )
        for i, c in enumerate(calls):
            messages.append(
                {"role": "tool", "tool_call_id": c.id or f"call_{i}", "content": step["tool_result"]}
            )
        payload = self.payload_for(case, messages, thinking, stream)
        answer = await self.send(payload)
        second = response_problems(answer)
        if not answer.error:
            if answer.tool_calls:
                second.append(
                    f"called {answer.tool_calls[0].name} again instead of answering with the result"
                )
            missing = missing_keyword_groups(answer.content, step.get("answer_expect") or [])
            if missing:
                second.append(
                    f"the answer does not use the tool result (lacks {lacking(missing)}): "
                    f"{answer.content[:160]!r}"
                )
            second.extend(markup_problems(answer))
        self.log.add(transcript(f"{label} answer", payload, answer, passed=not second, problems=second))
        messages.append({"role": "assistant", "content": answer.content})
        return [f"after the tool result: {p}" for p in second]


def _category_gates(rows: list[dict[str, Any]]) -> tuple[list[Gate], dict[str, dict[str, int]]]:
    """A gate per category (the known ones in their order, then any other), and the tallies."""
    by_category: dict[str, dict[str, int]] = {}
    for row in rows:
        tally = by_category.setdefault(row["category"], {"passed": 0, "total": 0})
        tally["total"] += 1
        tally["passed"] += row["passed"]
    gates = []
    for category in [c for c in CATEGORIES if c in by_category] + [
        c for c in by_category if c not in CATEGORIES
    ]:
        tally = by_category[category]
        failed = sorted(
            {f"{r['case']} ({r['problem']})" for r in rows if r["category"] == category and not r["passed"]}
        )
        gates.append(
            Gate.all_of(
                f"{category} calls correct", tally["passed"], tally["total"], detail="; ".join(failed[:3])
            )
        )
    return gates, by_category


def _short(calls: Any) -> str:
    text = json.dumps(calls, default=str)
    return text if len(text) <= 300 else text[:300] + "..."
