"""The answer rules: how the simulator derives a reply from the request. It never pretends to be a model.

Rules are tried in this order; the first that applies answers (docs/sim.md, "Answers"):
  1. tool result   - the conversation ends with tool messages: quote their results.
  2. tools         - tools offered and tool_choice != "none": call the best-matching tool(s)
                     (sim/tools.py); with "auto" and no match, no tool is called.
  3. vision        - the last user message has images: measure them (sim/vision.py).
  4. GSM8K oracle  - --gsm8k-oracle set and a GSM8K test question is in the last user
                     message: the answer key's (possibly deliberately wrong) answer.
  5. magic number  - "... special magic number(s) for X ...": the number(s) next to X in the prompt.
  6. math          - a word problem (a number plus "how many", "how much", "total", ...):
                     the last number in the question (the sim cannot reason).
  7. retrieval     - "what is the <thing> for X": the number next to X in the prompt, if any.
  8. echo          - the prompt's token count and the start of the last user message.
A response_format of json_schema / json_object wraps the content in JSON (see json_content).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from deploytool.sim.oracle import Gsm8kOracle
from deploytool.sim.request import ChatRequest, Message, RequestError, ToolSpec
from deploytool.sim.tools import (
    ArgumentSynth,
    PromptValues,
    best_tool,
    parallel_subjects,
    synthesize_arguments,
)
from deploytool.sim.vision import analyse_decoded

PREFIX = "Simulator, not a model: "

_NEEDLE_RE = re.compile(
    r"\bwhat\s+(?:is|are)\s+(?P<all>all\s+)?(?:the\s+)?(?P<thing>\w[\w\s'-]{0,60}?)\s+for\s+"
    r"(?P<key>[^?\n]{1,200}?)\s*(?=\bmentioned\b|\bin\s+the\s+(?:\w+\s+)?(?:text|context|document|passage)\b|\?|$)",
    re.IGNORECASE | re.MULTILINE,
)
_NUMBER_RE = re.compile(r"\d+(?:[.,]\d+)*")
# RULER's needle values: a UUID, else a number (scripts/data/synthetic/niah.py in NVIDIA/RULER)
_VALUE_RE = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\d+(?:[.,]\d+)*", re.IGNORECASE
)
_KEY_LIST_RE = re.compile(r",\s*(?:and\s+)?|\s+and\s+")
_MATH_RE = re.compile(
    r"\bhow\s+(?:many|much|long|far|old)\b|\bcalculate\b|\bcompute\b|\bsolve\b|\btotal\b|\bsum\b"
    r"|\bproduct\b|\bdifference\b|\d\s*[-+*/×÷x]\s*\d",
    re.IGNORECASE,
)
_SENTENCE_BREAK_RE = re.compile(r"\.(?:\s|$)|\n")
NEEDLE_WINDOW = 200  # characters searched on each side of the key: the needle's sentence


@dataclass
class ToolCallOut:
    name: str
    arguments: str  # JSON text, as SGLang returns it


@dataclass
class Answer:
    rule: str
    reasoning: str  # what the sim did, shown as reasoning_content when thinking is on
    content: str | None = None
    tool_calls: list[ToolCallOut] = field(default_factory=list)


@dataclass
class AnswerContext:
    tools_enabled: bool = True
    oracle: Gsm8kOracle | None = None


def derive_answer(req: ChatRequest, ctx: AnswerContext) -> Answer:
    answer = _derive(req, ctx)
    if req.response_format and not answer.tool_calls:
        answer = json_content(req, answer)
    return answer


def _derive(req: ChatRequest, ctx: AnswerContext) -> Answer:
    if req.messages[-1].role in ("tool", "function"):
        return tool_result_answer(req.messages)
    no_tool: Answer | None = None
    if req.tools and req.tool_choice != "none":
        answer = tool_answer(req, ctx)
        if answer.tool_calls or answer.rule == "tools-raw":
            return answer
        no_tool = answer
    last = req.last_user or Message(role="user", text="")
    rules = (
        lambda: vision_answer(req, last),
        lambda: oracle_answer(last, ctx.oracle),
        lambda: magic_number_answer(req, last),
        lambda: math_answer(req, last),
        lambda: retrieval_answer(req, last),
    )
    for rule in rules:
        found = rule()
        if found is not None:
            return found
    return no_tool or echo_answer(req, last)


# --- 1. tool results ---------------------------------------------------------------------------


def tool_result_answer(messages: list[Message]) -> Answer:
    results = []
    for m in reversed(messages):
        if m.role not in ("tool", "function"):
            break
        results.append(m.text.strip())
    results.reverse()
    quoted = "; ".join(_clip(r, 1000) for r in results)
    return Answer(
        rule="tool-result",
        reasoning=PREFIX + "the last message is a tool result, so I quote it.",
        content=f"The tool returned: {quoted}",
    )


# --- 2. tools ----------------------------------------------------------------------------------


def tool_answer(req: ChatRequest, ctx: AnswerContext) -> Answer:
    last = req.last_user.text if req.last_user else ""
    tool, why = _pick_tool(req, last)
    if tool is None:
        return Answer(
            rule="no-tool",
            reasoning=PREFIX + why,
            content="None of the provided tools applies to this request, so no tool was called.",
        )
    values = PromptValues.from_text(last)
    forced_name = isinstance(req.tool_choice, dict)
    subjects = [] if forced_name or not req.parallel_tool_calls else parallel_subjects(values)
    mixed = [] if forced_name or not req.parallel_tool_calls else _calls_per_clause(req.tools, last)
    if mixed:
        out = [
            ToolCallOut(t.name, json.dumps(synthesize_arguments(t, PromptValues.from_text(c))))
            for t, c in mixed
        ]
        reasoning = (
            PREFIX + "each sentence asks for a different tool: " + ", ".join(t.name for t, _ in mixed) + "."
        )
        return _tool_calls_answer(out, reasoning, ctx)
    if subjects:
        calls = [synthesize_arguments(tool, values, subject=s, skip=tuple(subjects)) for s in subjects]
    else:
        calls = [synthesize_arguments(tool, values)]
    out = [ToolCallOut(tool.name, json.dumps(args)) for args in calls]
    reasoning = PREFIX + why + (f" One call per subject: {', '.join(subjects)}." if subjects else "")
    return _tool_calls_answer(out, reasoning, ctx)


_CLAUSE_RE = re.compile(r"(?<=[.?!])\s+|;\s*")


def _calls_per_clause(tools: list[ToolSpec], message: str) -> list[tuple[ToolSpec, str]]:
    """Parallel calls to different functions: when two or more sentences of the message each
    match a different tool (score >= 1), one call per such sentence, in order."""
    picks: list[tuple[ToolSpec, str]] = []
    for clause in (c for c in _CLAUSE_RE.split(message) if c.strip()):
        scored = best_tool(tools, clause)
        if scored.score >= 1 and all(scored.tool.name != t.name for t, _ in picks):
            picks.append((scored.tool, clause))
    return picks if len(picks) >= 2 else []


def _tool_calls_answer(out: list[ToolCallOut], reasoning: str, ctx: AnswerContext) -> Answer:
    if not ctx.tools_enabled:
        # no tool-call parser: the model's raw call markup reaches the client as text
        raw = "\n".join(
            f'<tool_call>\n{{"name": {json.dumps(c.name)}, "arguments": {c.arguments}}}\n</tool_call>'
            for c in out
        )
        return Answer(rule="tools-raw", reasoning=reasoning, content=raw)
    return Answer(rule="tools", reasoning=reasoning, tool_calls=out)


def _pick_tool(req: ChatRequest, message: str) -> tuple[ToolSpec | None, str]:
    if isinstance(req.tool_choice, dict):
        name = req.tool_choice["function"]["name"]
        tool = next(t for t in req.tools if t.name == name)
        return tool, f"tool_choice forces {name}."
    scored = best_tool(req.tools, message)
    if scored.score >= 1:
        return scored.tool, (
            f"{scored.tool.name} shares the most words with the request "
            f"(score {scored.score}: {', '.join(scored.shared)})."
        )
    if req.tool_choice == "required":
        return (
            scored.tool,
            f"tool_choice is 'required'; no tool shares a word, so the first one, {scored.tool.name}.",
        )
    return None, "no tool shares a meaningful word with the request, so no tool is called."


# --- 3. vision ---------------------------------------------------------------------------------

_REFERS_TO_IMAGE = re.compile(r"\b(?:image|picture|photo)s?\b", re.IGNORECASE)


def vision_answer(req: ChatRequest, last: Message) -> Answer | None:
    images = last.images
    if not images and _REFERS_TO_IMAGE.search(last.text):
        # a follow-up about an image sent earlier in the conversation: the latest one is meant
        images = next((m.images for m in reversed(req.messages) if m.images), [])
    if not images:
        return None
    reports = [analyse_decoded(img) for img in images]
    body = " ".join(r.sentence(i + 1) for i, r in enumerate(reports))
    question = last.text.lower()
    lead = ""
    if "how many" in question:
        lead = " and ".join(str(r.shapes) for r in reports) + ". "
    elif "colour" in question or "color" in question:
        lead = " and ".join((r.dominant or r.background) for r in reports).capitalize() + ". "
    reasoning = (
        PREFIX + "measuring each image with pillow: the background is the most common border colour, "
        "shapes are 4-connected regions of other colours."
    )
    return Answer(rule="vision", reasoning=reasoning, content=lead + body)


# --- 4. GSM8K oracle ---------------------------------------------------------------------------


def oracle_answer(last: Message, oracle: Gsm8kOracle | None) -> Answer | None:
    if oracle is None:
        return None
    found = oracle.answer(last.text)
    if found is None:
        return None
    reasoning = (
        PREFIX + f"looking this question up in the GSM8K answer key (set to be right for "
        f"{oracle.accuracy:.0%} of questions; wrong answers are the key's answer + 1)."
    )
    return Answer(rule="gsm8k-oracle", reasoning=reasoning, content=found.text)


# --- 5 and 7. needle / retrieval ---------------------------------------------------------------


@dataclass
class NeedleQuestion:
    thing: str
    key: str
    wants_all: bool
    start: int  # span of the question in the last user message, excluded from the search
    end: int

    @property
    def is_magic(self) -> bool:
        return "magic" in self.thing.lower()  # RULER's values: numbers, words or uuids


def find_needle_question(text: str) -> NeedleQuestion | None:
    """The last 'what is the <thing> for <key>' in the message (questions come at the end)."""
    offset = max(0, len(text) - 4000)
    matches = list(_NEEDLE_RE.finditer(text, offset))
    if not matches:
        return None
    match = matches[-1]
    key = match.group("key").strip().strip("\"'“”‘’`.,:;").strip()
    if not key:
        return None
    return NeedleQuestion(
        thing=match.group("thing").strip(),
        key=key,
        wants_all=bool(match.group("all")),
        start=match.start(),
        end=match.end(),
    )


def find_needles(
    haystack: str, key: str, limit: int = 1000, values: re.Pattern[str] = _NUMBER_RE
) -> list[str]:
    """Numbers in the sentence of each occurrence of key, first occurrence first (str.find, no token loops)."""
    hay = haystack.lower()
    needle = key.lower()
    found: list[str] = []
    pos = hay.find(needle)
    while pos >= 0 and len(found) < limit:
        number = _number_near(haystack, pos, pos + len(needle), values)
        if number is not None and number not in found:
            found.append(number)
        pos = hay.find(needle, pos + len(needle))
    return found


def _number_near(text: str, start: int, end: int, values: re.Pattern[str] = _NUMBER_RE) -> str | None:
    after = text[end : end + NEEDLE_WINDOW]
    cut = _SENTENCE_BREAK_RE.search(after)
    match = values.search(after[: cut.start() if cut else None])
    if match:
        return match.group().rstrip(".,")
    before = text[max(0, start - NEEDLE_WINDOW) : start]
    breaks = list(_SENTENCE_BREAK_RE.finditer(before))
    numbers = values.findall(before[breaks[-1].end() if breaks else 0 :])
    return numbers[-1].rstrip(".,") if numbers else None


def _needle_haystack(req: ChatRequest, last: Message, q: NeedleQuestion) -> str:
    parts = [m.text for m in req.messages if m is not last]
    parts.append(last.text[: q.start] + " " + last.text[q.end :])
    return "\n".join(parts)


def _needle_reply(q: NeedleQuestion, numbers: list[str]) -> str:
    if q.wants_all and len(numbers) > 1:
        listed = ", ".join(numbers[:-1]) + " and " + numbers[-1]
        return f"The {q.thing} for {q.key} are {listed}."
    return f"The {q.thing} for {q.key} is {numbers[0]}."


def magic_number_answer(req: ChatRequest, last: Message) -> Answer | None:
    q = find_needle_question(last.text)
    if q is None or not q.is_magic:
        return None
    haystack = _needle_haystack(req, last, q)
    numbers = find_needles(haystack, q.key, values=_VALUE_RE)
    if not numbers and _KEY_LIST_RE.search(q.key):  # RULER multi-query: "a, b, and c"
        numbers = [
            v
            for key in _KEY_LIST_RE.split(q.key)
            if key.strip()
            for v in find_needles(haystack, key.strip(), values=_VALUE_RE)
        ]
    reasoning = PREFIX + f"looking for a number in the prompt next to '{q.key}'."
    if not numbers:
        return Answer(
            rule="magic-number",
            reasoning=reasoning,
            content=f"I could not find the {q.thing} for {q.key} in the provided text.",
        )
    return Answer(rule="magic-number", reasoning=reasoning, content=_needle_reply(q, numbers))


def retrieval_answer(req: ChatRequest, last: Message) -> Answer | None:
    q = find_needle_question(last.text)
    if q is None:
        return None
    numbers = find_needles(_needle_haystack(req, last, q), q.key)
    if not numbers:
        return None
    return Answer(
        rule="retrieval",
        reasoning=PREFIX + f"looking for a number in the prompt next to '{q.key}'.",
        content=_needle_reply(q, numbers),
    )


# --- 6. math -----------------------------------------------------------------------------------


def math_answer(req: ChatRequest, last: Message) -> Answer | None:
    numbers = _NUMBER_RE.findall(last.text)
    if not numbers or not _MATH_RE.search(last.text):
        return None
    n = numbers[-1].rstrip(".,")
    reasoning = PREFIX + "I cannot do arithmetic; the rule is to answer with the last number in the question."
    return Answer(rule="math", reasoning=reasoning, content=f"The answer is {n}.")


# --- 8. echo -----------------------------------------------------------------------------------


def echo_answer(req: ChatRequest, last: Message) -> Answer:
    start = " ".join(last.text.split())[:80]
    return Answer(
        rule="echo",
        reasoning=PREFIX + "no specific rule matched, so I echo the request.",
        content=f"Simulator reply: I received {req.prompt_tokens} tokens; the last user message was: '{start}'",
    )


# --- response_format ---------------------------------------------------------------------------


def json_content(req: ChatRequest, answer: Answer) -> Answer:
    """json_schema: an object synthesized from the schema (like tool arguments); json_object:
    {"answer": <the rule's content>}."""
    fmt = req.response_format or {}
    if fmt.get("type") == "json_schema":
        spec = fmt.get("json_schema") or {}
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise RequestError("response_format json_schema needs json_schema.schema")
        last = req.last_user.text if req.last_user else ""
        value: Any = ArgumentSynth(PromptValues.from_text(last)).value("value", schema)
        return Answer(
            rule=answer.rule + "+json_schema", reasoning=answer.reasoning, content=json.dumps(value)
        )
    if fmt.get("type") == "json_object":
        return Answer(
            rule=answer.rule + "+json_object",
            reasoning=answer.reasoning,
            content=json.dumps({"answer": answer.content or ""}),
        )
    return answer


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
