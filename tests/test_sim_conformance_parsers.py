"""Conformance (b): the raw model-format text the sim generates, fed through sglang 0.5.23's own
FunctionCallParser (sglang/srt/function_call/function_call_parser.py: qwen3_coder, qwen25,
glm47) and ReasoningParser (sglang/srt/parser/reasoning_parser.py: qwen3, glm45) piece by piece,
must give exactly the deltas the sim streams over HTTP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from sglang_referee import referee

from deploytool.sim.answers import AnswerContext, derive_answer
from deploytool.sim.faults import FaultState, parse_faults
from deploytool.sim.generation import build_plan
from deploytool.sim.request import parse_chat_request
from deploytool.sim.server import serve_in_thread
from deploytool.sim.settings import SimSettings
from deploytool.sim.toolformats import raw_pieces

CHAT = "/v1/chat/completions"
BASE = dict(startup_seconds=0.0, decode_tps=50000.0, prefill_tps=1e8, log_requests=False)
TOOLS = [
    {"type": "function", "function": {
        "name": "get_current_weather", "description": "Get the current weather for a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "days": {"type": "integer"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city", "days"]}}},
    {"type": "function", "function": {
        "name": "book_flight", "description": "Book a flight between two airports",
        "parameters": {"type": "object", "properties": {
            "origin": {"type": "string"}, "destination": {"type": "string"}, "passengers": {"type": "integer"},
            "max_price": {"type": "number"}, "refundable": {"type": "boolean"},
            "options": {"type": "object", "properties": {"seat": {"type": "string"}, "bags": {"type": "integer"}},
                        "required": ["seat", "bags"]}},
            "required": ["origin", "destination", "passengers", "max_price", "options"]}}},
    {"type": "function", "function": {"name": "list_alarms", "description": "List the alarms that are set",
                                      "parameters": {"type": "object", "properties": {}}}},
]
PROMPTS = (
    "What will the weather be in Lisbon over the next 3 days, in fahrenheit?",
    "What's the weather in Oslo and in Rome for 2 days?",
    "Weather in Zürich for 1 day",
    "Book a flight from 'SFO' to 'JFK' for 2 passengers under 450.5 dollars, refundable true",
    "List the alarms that are set",
)

TOOL_PARSER = r'''
import json, sys
from sglang.srt.entrypoints.openai.protocol import Tool
from sglang.srt.function_call.function_call_parser import FunctionCallParser
out = []
for case in json.load(sys.stdin):
    parser = FunctionCallParser([Tool(**t) for t in case["tools"]], case["format"])
    deltas, normal = [], ""
    for piece in case["pieces"]:
        text, calls = parser.parse_stream_chunk(piece)
        normal += text
        deltas += [[c.tool_index, c.name, c.parameters] for c in calls]
    whole = FunctionCallParser([Tool(**t) for t in case["tools"]], case["format"]).parse_non_stream("".join(case["pieces"]))
    out.append({"deltas": deltas, "normal": normal,
                "non_stream": [[c.name, json.loads(c.parameters)] for c in whole[1]], "non_stream_normal": whole[0]})
print(json.dumps(out))
'''

REASONING_PARSER = r'''
import json, sys
from sglang.srt.parser.reasoning_parser import ReasoningParser
out = []
for case in json.load(sys.stdin):
    parser = ReasoningParser(case["parser"], stream_reasoning=True, force_reasoning=case["thinking"])
    deltas = []
    for piece in case["pieces"]:
        reasoning, normal = parser.parse_stream_chunk(piece)
        deltas += [["reasoning_content", reasoning]] if reasoning else []
        deltas += [["content", normal]] if normal else []
    whole = ReasoningParser(case["parser"], stream_reasoning=False, force_reasoning=case["thinking"])
    out.append({"deltas": deltas, "non_stream": list(whole.parse_non_stream("".join(case["pieces"])))})
print(json.dumps(out))
'''


def _stream(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    with httpx.stream("POST", url + CHAT, json={**body, "stream": True}, timeout=30) as response:
        return [json.loads(line[6:])["choices"][0] for line in response.iter_lines()
                if line.startswith("data: {")]


@pytest.mark.parametrize("fmt", ["qwen25", "qwen3_coder", "glm47"])
def test_streamed_tool_calls_are_what_sglangs_parser_makes_of_the_raw_text(fmt: str, sglang_referee_python: Path) -> None:
    settings = SimSettings(**BASE, tool_call_parser=fmt, default_chat_template_kwargs='{"enable_thinking": false}')
    cases, streams, plains = [], [], []
    with serve_in_thread(settings, wait_ready=True) as sim:
        for prompt in PROMPTS:
            body = {"model": "sim-model", "messages": [{"role": "user", "content": prompt}], "tools": TOOLS}
            choices = _stream(sim.url, body)
            deltas = [[tc["index"], tc["function"]["name"], tc["function"]["arguments"]]
                      for c in choices for tc in (c["delta"].get("tool_calls") or [])]
            assert all(not c["delta"].get("content") for c in choices)  # nothing but the calls
            assert choices[-1]["finish_reason"] == "tool_calls"
            names = [d[1] for d in deltas if d[1]]
            arguments = ["".join(d[2] for d in deltas if d[0] == i and not d[1]) for i in range(len(names))]
            calls = [(name, json.loads(args)) for name, args in zip(names, arguments)]
            cases.append({"format": fmt, "tools": TOOLS, "pieces": raw_pieces(fmt, calls)})
            streams.append(deltas)
            plains.append(httpx.post(sim.url + CHAT, json=body, timeout=30).json()["choices"][0]["message"])
    verdicts = referee(sglang_referee_python, TOOL_PARSER, cases)
    assert len(verdicts) == len(PROMPTS)
    for prompt, sim_deltas, plain, verdict in zip(PROMPTS, streams, plains, verdicts):
        assert sim_deltas == verdict["deltas"], prompt
        assert verdict["normal"] == "" and verdict["non_stream_normal"] == "" == plain["content"]
        assert [[c["function"]["name"], json.loads(c["function"]["arguments"])] for c in plain["tool_calls"]] \
            == verdict["non_stream"], prompt
    assert {len(s) for s in streams} != {0}
    assert any(len({d[0] for d in s}) == 2 for s in streams)  # the parallel case made two calls
    called = {d[1] for s in streams for d in s if d[1]}
    assert {"get_current_weather", "book_flight", "list_alarms"} <= called  # nested, typed and empty arguments


@pytest.mark.parametrize("parser", ["qwen3", "glm45"])
def test_streamed_reasoning_is_what_sglangs_reasoning_parser_makes_of_the_raw_text(parser: str, sglang_referee_python: Path) -> None:
    settings = SimSettings(**BASE, reasoning_parser=parser)
    bodies = [
        {"model": "sim-model", "messages": [{"role": "user", "content": "Which ocean lies between Europe and America?"}]},
        {"model": "sim-model", "messages": [{"role": "user", "content": "Say hi"}],
         "chat_template_kwargs": {"enable_thinking": True}},
        {"model": "sim-model", "messages": [{"role": "user", "content": "Say hi"}],
         "chat_template_kwargs": {"enable_thinking": False}},
    ]
    cases, streams, plains = [], [], []
    with serve_in_thread(settings, wait_ready=True) as sim:
        for body in bodies:
            choices = _stream(sim.url, body)[1:-1]  # without the role chunk and the finish chunk
            streams.append([[key, c["delta"][key]] for c in choices for key in ("reasoning_content", "content")
                            if c["delta"].get(key)])
            plains.append(httpx.post(sim.url + CHAT, json=body, timeout=30).json()["choices"][0]["message"])
            # the raw text the simulated model wrote for this request, token by token
            req = parse_chat_request(json.dumps(body).encode(), settings)
            plan = build_plan(derive_answer(req, AnswerContext(tools_enabled=True)), req, settings,
                              FaultState(parse_faults(()), lambda code: None))
            thinking = body.get("chat_template_kwargs", {}).get("enable_thinking", True)
            cases.append({"parser": parser, "thinking": thinking, "pieces": [u.text for u in plan.units]})
    verdicts = referee(sglang_referee_python, REASONING_PARSER, cases)
    for body, sim_deltas, plain, verdict in zip(bodies, streams, plains, verdicts):
        assert sim_deltas == verdict["deltas"], body
        reasoning, content = verdict["non_stream"]
        assert (plain["reasoning_content"] or None, plain["content"]) == (reasoning or None, content)
    assert streams[0][0][0] == "reasoning_content"  # no chat_template_kwargs: the parser's default thinks
    assert all(kind == "content" for kind, _ in streams[2])


CHAINED = r'''
import json, sys
from sglang.srt.entrypoints.openai.protocol import Tool
from sglang.srt.function_call.function_call_parser import FunctionCallParser
from sglang.srt.parser.reasoning_parser import ReasoningParser
out = []
for case in json.load(sys.stdin):
    # as serving_chat.py streams: the reasoning parser first, its normal text into the tool parser
    reasoning = ReasoningParser(case["parser"], stream_reasoning=True, force_reasoning=True)
    tools = FunctionCallParser([Tool(**t) for t in case["tools"]], case["format"])
    deltas = []
    for piece in case["pieces"]:
        thought, normal = reasoning.parse_stream_chunk(piece)
        if thought:
            deltas.append(["reasoning_content", thought])
        if normal:
            text, calls = tools.parse_stream_chunk(normal)
            if text:
                deltas.append(["content", text])
            deltas += [["tool", c.tool_index, c.name, c.parameters] for c in calls]
    out.append(deltas)
print(json.dumps(out))
'''


@pytest.mark.parametrize("fmt", ["qwen25", "qwen3_coder"])
def test_tool_calls_after_thinking_stream_as_sglangs_chained_parsers_make_them(fmt: str, sglang_referee_python: Path) -> None:
    settings = SimSettings(**BASE, tool_call_parser=fmt)  # qwen3 reasoning parser: thinks by default
    body = {"model": "sim-model", "messages": [{"role": "user", "content": PROMPTS[1]}], "tools": TOOLS}
    with serve_in_thread(settings, wait_ready=True) as sim:
        choices = _stream(sim.url, body)[1:-1]
    sim_deltas = []
    for c in choices:
        delta = c["delta"]
        for key in ("reasoning_content", "content"):
            if delta.get(key):
                sim_deltas.append([key, delta[key]])
        sim_deltas += [["tool", t["index"], t["function"]["name"], t["function"]["arguments"]]
                       for t in delta.get("tool_calls") or []]
    names = [d[2] for d in sim_deltas if d[0] == "tool" and d[2]]
    calls = [(name, json.loads("".join(d[3] for d in sim_deltas if d[0] == "tool" and d[1] == i and not d[2])))
             for i, name in enumerate(names)]
    req = parse_chat_request(json.dumps(body).encode(), settings)
    plan = build_plan(derive_answer(req, AnswerContext(tools_enabled=True)), req, settings,
                      FaultState(parse_faults(()), lambda code: None))
    thinking_pieces = [u.text for u in plan.units if u.kind in ("reasoning", "hidden", "content")]
    (verdict,) = referee(sglang_referee_python, CHAINED, [{"parser": "qwen3", "format": fmt, "tools": TOOLS,
                                     "pieces": thinking_pieces + raw_pieces(fmt, calls)}])
    assert len(names) == 2 and sim_deltas[0][0] == "reasoning_content"
    assert sim_deltas == verdict
