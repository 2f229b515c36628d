"""Turn an Answer into the exact sequence of output tokens: thinking, budget, filler, finish reason.

Output is a list of Units. Every unit is one streamed delta; its ``cost`` is the
number of output tokens it stands for (1, except a tool call's opening delta,
which costs the tokens of the function name). Completion tokens = sum of costs.
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass, field
from typing import Any

from deploytool.sim.answers import Answer, ToolCallOut
from deploytool.sim.faults import FaultState
from deploytool.sim.request import ChatRequest
from deploytool.sim.settings import SimSettings
from deploytool.sim.tokens import count_tokens, fragments
from deploytool.sim.toolformats import argument_deltas, parse_arguments, raw_text

FILLER_WORDS = [
    "the",
    "simulator",
    "is",
    "generating",
    "filler",
    "tokens",
    "because",
    "the",
    "request",
    "asked",
    "for",
    "more",
    "output",
    "than",
    "the",
    "answer",
    "has",
]


@dataclass
class Unit:
    kind: str  # "reasoning" | "content" | "tool_start" | "tool_args"
    text: str
    cost: int = 1
    index: int = 0  # tool call index
    call_id: str = ""


@dataclass
class Plan:
    units: list[Unit]
    finish_reason: str
    reasoning_tokens: int
    tool_calls: list[dict[str, Any]] = field(default_factory=list)

    @property
    def completion_tokens(self) -> int:
        return sum(u.cost for u in self.units)

    def text_of(self, kind: str) -> str | None:
        parts = [u.text for u in self.units if u.kind == kind]
        return "".join(parts) if parts else None


def thinking_on(req: ChatRequest, settings: SimSettings) -> bool:
    """SGLang's rule (sglang/srt/entrypoints/openai/serving_chat.py `_get_reasoning_from_request`):
    --default-chat-template-kwargs fill what the request left unset; then the qwen3 and glm45
    parsers' mode 'enable_thinking' thinks unless enable_thinking is false."""
    if req.thinking is not None:
        return req.thinking
    defaults = settings.chat_template_defaults
    for key in ("enable_thinking", "thinking"):
        if defaults.get(key) is not None:
            return bool(defaults[key])
    if settings.thinking_default is not None:
        return settings.thinking_default
    return True  # reasoning_default "enable_thinking" (and a Qwen3 template without a parser thinks too)


def build_plan(answer: Answer, req: ChatRequest, settings: SimSettings, faults: FaultState) -> Plan:
    limit = req.max_tokens if req.max_tokens is not None else settings.context_length - req.prompt_tokens
    thinking = thinking_on(req, settings)
    inline = thinking and (
        settings.no_reasoning_field or settings.reasoning_parser is None or not req.separate_reasoning
    )

    content = answer.content
    reasoning_units: list[Unit] = []
    if thinking and inline:
        # a reasoning parser that is missing or off leaves the model's think block in content
        content = f"<think>\n{answer.reasoning}\n</think>\n\n" + (content or "")
    elif thinking:
        # The model writes "REASONING\n</think>\n\nANSWER"; sglang's reasoning parser streams the
        # newline before </think> as reasoning, swallows the tag and passes "\n\n" on as content
        # (held by tests/test_sim_conformance_parsers.py).
        reasoning_units = [Unit("reasoning", f) for f in fragments(answer.reasoning)]
        reasoning_units += [
            Unit("reasoning", "\n"),
            Unit("hidden", "</think>"),
            Unit("content", "\n\n", cost=2),
        ]

    calls = [
        ToolCallOut(
            c.name, faults.corrupt_arguments(c.arguments) if faults.config.bad_tool_json else c.arguments
        )
        for c in answer.tool_calls
    ]
    fmt = settings.tool_call_parser
    body = _tool_units(calls, fmt) if calls else [Unit("content", f) for f in fragments(content or "")]
    units = reasoning_units + body

    cut = sum(u.cost for u in units) > limit
    if cut and calls:
        # a call cut by max_tokens cannot be parsed: its raw markup stays in content, as in SGLang
        raw = "".join(
            raw_text(fmt, [(c.name, parse_arguments(c.arguments) or {})])
            if parse_arguments(c.arguments) is not None
            else f'<tool_call>\n{{"name": {json.dumps(c.name)}, "arguments": {c.arguments}}}\n</tool_call>'
            for c in calls
        )
        calls = []
        units = reasoning_units + [Unit("content", f) for f in fragments(raw)]
    if cut:
        units = _take(units, limit)

    padded_to = limit if req.ignore_eos else min(req.min_tokens, limit)
    units += _filler(padded_to - sum(u.cost for u in units), req)

    if cut or (req.ignore_eos and sum(u.cost for u in units) >= limit):
        finish = "length"
    elif calls:
        finish = "tool_calls"
    else:
        finish = "stop"
    tool_calls = [
        {
            "id": u.call_id,
            "index": None,
            "type": "function",
            "function": {
                "name": u.text,
                "arguments": "".join(a.text for a in units if a.kind == "tool_args" and a.index == u.index),
            },
        }
        for u in units
        if u.kind == "tool_start"
    ]
    reasoning_tokens = sum(u.cost for u in units if u.kind == "reasoning")
    return Plan(units=units, finish_reason=finish, reasoning_tokens=reasoning_tokens, tool_calls=tool_calls)


def _tool_units(calls: list[ToolCallOut], fmt: str) -> list[Unit]:
    """The name delta, then the argument deltas sglang's `fmt` parser streams (sim/toolformats.py).
    Arguments that are not a JSON object (the bad_tool_json fault) stream as raw fragments."""
    units = []
    for i, call in enumerate(calls):
        call_id = "call_" + uuid.uuid4().hex[:24]
        units.append(
            Unit("tool_start", call.name, cost=max(1, count_tokens(call.name)), index=i, call_id=call_id)
        )
        args = parse_arguments(call.arguments)
        pieces = argument_deltas(fmt, args) if args is not None else fragments(call.arguments)
        units += [
            Unit("tool_args", f, cost=max(1, count_tokens(f)), index=i, call_id=call_id) for f in pieces
        ]
    return units


def _take(units: list[Unit], limit: int) -> list[Unit]:
    out, used = [], 0
    for unit in units:
        if used + unit.cost > limit:
            break
        out.append(unit)
        used += unit.cost
    return out


def _filler(count: int, req: ChatRequest) -> list[Unit]:
    """Filler tokens for ignore_eos / min_tokens. Fixed words at temperature 0, seeded picks above it."""
    if count <= 0:
        return []
    if req.temperature > 0:
        rng = random.Random(req.seed)  # seed None: fresh randomness
        words = [rng.choice(FILLER_WORDS) for _ in range(count)]
    else:
        words = [FILLER_WORDS[i % len(FILLER_WORDS)] for i in range(count)]
    return [Unit("content", " " + w) for w in words]
