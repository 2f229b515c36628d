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

FILLER_WORDS = ("the simulator is generating filler tokens because the request asked for more output "
                "than the answer has").split()


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
    return settings.thinking_default if req.thinking is None else req.thinking


def build_plan(answer: Answer, req: ChatRequest, settings: SimSettings, faults: FaultState) -> Plan:
    limit = req.max_tokens if req.max_tokens is not None else settings.context_length - req.prompt_tokens
    thinking = thinking_on(req, settings)
    inline = thinking and (settings.no_reasoning_field or not req.separate_reasoning)

    content = answer.content
    reasoning_units: list[Unit] = []
    if thinking and inline:
        # a reasoning parser that is missing or off leaves the model's think block in content
        content = f"<think>\n{answer.reasoning}\n</think>\n\n" + (content or "")
    elif thinking:
        reasoning_units = [Unit("reasoning", f) for f in fragments(answer.reasoning)]

    calls = [ToolCallOut(c.name, faults.corrupt_arguments(c.arguments) if faults.config.bad_tool_json
                         else c.arguments) for c in answer.tool_calls]
    body = _tool_units(calls) if calls else [Unit("content", f) for f in fragments(content or "")]
    units = reasoning_units + body

    cut = sum(u.cost for u in units) > limit
    if cut and calls:
        # a call cut by max_tokens cannot be parsed: its raw markup stays in content, as in SGLang
        raw = "\n".join(f'<tool_call>\n{{"name": {json.dumps(c.name)}, "arguments": {c.arguments}}}\n</tool_call>'
                        for c in calls)
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
    tool_calls = [{"id": u.call_id, "index": u.index, "type": "function",
                   "function": {"name": u.text, "arguments": "".join(a.text for a in units
                                                                   if a.kind == "tool_args" and a.index == u.index)}}
                  for u in units if u.kind == "tool_start"]
    reasoning_tokens = sum(u.cost for u in units if u.kind == "reasoning")
    return Plan(units=units, finish_reason=finish, reasoning_tokens=reasoning_tokens, tool_calls=tool_calls)


def _tool_units(calls: list[ToolCallOut]) -> list[Unit]:
    units = []
    for i, call in enumerate(calls):
        call_id = "call_" + uuid.uuid4().hex[:24]
        units.append(Unit("tool_start", call.name, cost=max(1, count_tokens(call.name)), index=i, call_id=call_id))
        units += [Unit("tool_args", f, index=i, call_id=call_id) for f in fragments(call.arguments)]
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
