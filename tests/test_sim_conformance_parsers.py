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
BASE = {"startup_seconds": 0.0, "decode_tps": 50000.0, "prefill_tps": 1e8, "log_requests": False}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_current_weather",
            "description": "Get the current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city", "days"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "book_flight",
            "description": "Book a flight between two airports",
            "parameters": {
                "type": "object",
                "properties": {
                    "origin": {"type": "string"},
                    "destination": {"type": "string"},
                    "passengers": {"type": "integer"},
                    "max_price": {"type": "number"},
                    "refundable": {"type": "boolean"},
                    "options": {
                        "type": "object",
                        "properties": {"seat": {"type": "string"}, "bags": {"type": "integer"}},
                        "required": ["seat", "bags"],
                    },
                },
                "required": ["origin", "destination", "passengers", "max_price", "options"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "list_alarms",
            "description": "List the alarms that are set",
            "parameters": {"type": "object", "properties": {}},
        },
    },
]
PROMPTS = (
    "What will the weather be in Lisbon over the next 3 days, in fahrenheit?",
    "What's the weather in Oslo and in Rome for 2 days?",
    "Weather in Zürich for 1 day",
    "Book a flight from 'SFO' to 'JFK' for 2 passengers under 450.5 dollars, refundable true",
    "List the alarms that are set",
)

# sglang's code, run once for every case of this file (one start-up of sglang in the referee
# environment): a case's "kind" says which of sglang's parsers it goes through.
REFEREE = r"""
import json, sys
from sglang.srt.entrypoints.openai.protocol import Tool
from sglang.srt.function_call.function_call_parser import FunctionCallParser
from sglang.srt.parser.reasoning_parser import ReasoningParser


def tools(case):
    parser = FunctionCallParser([Tool(**t) for t in case["tools"]], case["format"])
    deltas, normal = [], ""
    for piece in case["pieces"]:
        text, calls = parser.parse_stream_chunk(piece)
        normal += text
        deltas += [[c.tool_index, c.name, c.parameters] for c in calls]
    whole = FunctionCallParser([Tool(**t) for t in case["tools"]], case["format"]).parse_non_stream("".join(case["pieces"]))
    return {"deltas": deltas, "normal": normal,
            "non_stream": [[c.name, json.loads(c.parameters)] for c in whole[1]], "non_stream_normal": whole[0]}


def reasoning(case):
    parser = ReasoningParser(case["parser"], stream_reasoning=True, force_reasoning=case["thinking"])
    deltas = []
    for piece in case["pieces"]:
        thought, normal = parser.parse_stream_chunk(piece)
        deltas += [["reasoning_content", thought]] if thought else []
        deltas += [["content", normal]] if normal else []
    whole = ReasoningParser(case["parser"], stream_reasoning=False, force_reasoning=case["thinking"])
    return {"deltas": deltas, "non_stream": list(whole.parse_non_stream("".join(case["pieces"])))}


def chained(case):
    # as serving_chat.py streams: the reasoning parser first, its normal text into the tool parser
    thinking = ReasoningParser(case["parser"], stream_reasoning=True, force_reasoning=True)
    calls_parser = FunctionCallParser([Tool(**t) for t in case["tools"]], case["format"])
    deltas = []
    for piece in case["pieces"]:
        thought, normal = thinking.parse_stream_chunk(piece)
        if thought:
            deltas.append(["reasoning_content", thought])
        if normal:
            text, calls = calls_parser.parse_stream_chunk(normal)
            if text:
                deltas.append(["content", text])
            deltas += [["tool", c.tool_index, c.name, c.parameters] for c in calls]
    return deltas


KINDS = {"tools": tools, "reasoning": reasoning, "chained": chained}
print(json.dumps([KINDS[case["kind"]](case) for case in json.load(sys.stdin)]))
"""
TOOL_FORMATS = ["qwen25", "qwen3_coder", "glm47"]
REASONING_PARSERS = ["qwen3", "glm45"]
CHAINED_FORMATS = ["qwen25", "qwen3_coder"]


def _stream(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    with httpx.stream("POST", url + CHAT, json={**body, "stream": True}, timeout=30) as response:
        return [
            json.loads(line[6:])["choices"][0] for line in response.iter_lines() if line.startswith("data: {")
        ]


def _tool_calls_streamed(fmt: str) -> tuple[list[dict], list[list], list[dict]]:
    """Each prompt's raw model-format text (the referee's case), the deltas the sim streamed for
    it and its non-streamed message."""
    settings = SimSettings(
        **BASE, tool_call_parser=fmt, default_chat_template_kwargs='{"enable_thinking": false}'
    )
    cases, streams, plains = [], [], []
    with serve_in_thread(settings, wait_ready=True) as sim:
        for prompt in PROMPTS:
            body = {"model": "sim-model", "messages": [{"role": "user", "content": prompt}], "tools": TOOLS}
            choices = _stream(sim.url, body)
            deltas = [
                [tc["index"], tc["function"]["name"], tc["function"]["arguments"]]
                for c in choices
                for tc in (c["delta"].get("tool_calls") or [])
            ]
            assert all(not c["delta"].get("content") for c in choices)  # nothing but the calls
            assert choices[-1]["finish_reason"] == "tool_calls"
            names = [d[1] for d in deltas if d[1]]
            arguments = ["".join(d[2] for d in deltas if d[0] == i and not d[1]) for i in range(len(names))]
            calls = [(name, json.loads(args)) for name, args in zip(names, arguments, strict=False)]
            cases.append({"kind": "tools", "format": fmt, "tools": TOOLS, "pieces": raw_pieces(fmt, calls)})
            streams.append(deltas)
            plains.append(httpx.post(sim.url + CHAT, json=body, timeout=30).json()["choices"][0]["message"])
    return cases, streams, plains


@pytest.mark.parametrize("fmt", TOOL_FORMATS)
def test_streamed_tool_calls_are_what_sglangs_parser_makes_of_the_raw_text(fmt: str, refereed: dict) -> None:
    streams, plains, verdicts = refereed["tools", fmt]
    assert len(verdicts) == len(PROMPTS)
    for prompt, sim_deltas, plain, verdict in zip(PROMPTS, streams, plains, verdicts, strict=False):
        assert sim_deltas == verdict["deltas"], prompt
        assert verdict["normal"] == "" and verdict["non_stream_normal"] == "" == plain["content"]
        assert [
            [c["function"]["name"], json.loads(c["function"]["arguments"])] for c in plain["tool_calls"]
        ] == verdict["non_stream"], prompt
    assert {len(s) for s in streams} != {0}
    assert any(len({d[0] for d in s}) == 2 for s in streams)  # the parallel case made two calls
    called = {d[1] for s in streams for d in s if d[1]}
    assert {
        "get_current_weather",
        "book_flight",
        "list_alarms",
    } <= called  # nested, typed and empty arguments


REASONING_BODIES = [
    {
        "model": "sim-model",
        "messages": [{"role": "user", "content": "Which ocean lies between Europe and America?"}],
    },
    {
        "model": "sim-model",
        "messages": [{"role": "user", "content": "Say hi"}],
        "chat_template_kwargs": {"enable_thinking": True},
    },
    {
        "model": "sim-model",
        "messages": [{"role": "user", "content": "Say hi"}],
        "chat_template_kwargs": {"enable_thinking": False},
    },
]


def _written(body: dict[str, Any], settings: SimSettings) -> list:
    """The raw text the simulated model wrote for this request, unit by unit (before any parser)."""
    req = parse_chat_request(json.dumps(body).encode(), settings)
    return build_plan(
        derive_answer(req, AnswerContext(tools_enabled=True)),
        req,
        settings,
        FaultState(parse_faults(()), lambda code: None),
    ).units


def _reasoning_streamed(parser: str) -> tuple[list[dict], list[list], list[dict]]:
    settings = SimSettings(**BASE, reasoning_parser=parser)
    cases, streams, plains = [], [], []
    with serve_in_thread(settings, wait_ready=True) as sim:
        for body in REASONING_BODIES:
            choices = _stream(sim.url, body)[1:-1]  # without the role chunk and the finish chunk
            streams.append(
                [
                    [key, c["delta"][key]]
                    for c in choices
                    for key in ("reasoning_content", "content")
                    if c["delta"].get(key)
                ]
            )
            plains.append(httpx.post(sim.url + CHAT, json=body, timeout=30).json()["choices"][0]["message"])
            thinking = body.get("chat_template_kwargs", {}).get("enable_thinking", True)
            cases.append(
                {
                    "kind": "reasoning",
                    "parser": parser,
                    "thinking": thinking,
                    "pieces": [u.text for u in _written(body, settings)],
                }
            )
    return cases, streams, plains


@pytest.mark.parametrize("parser", REASONING_PARSERS)
def test_streamed_reasoning_is_what_sglangs_reasoning_parser_makes_of_the_raw_text(
    parser: str, refereed: dict
) -> None:
    streams, plains, verdicts = refereed["reasoning", parser]
    assert len(verdicts) == len(REASONING_BODIES)
    for body, sim_deltas, plain, verdict in zip(REASONING_BODIES, streams, plains, verdicts, strict=False):
        assert sim_deltas == verdict["deltas"], body
        reasoning, content = verdict["non_stream"]
        assert (plain["reasoning_content"] or None, plain["content"]) == (reasoning or None, content)
    assert streams[0][0][0] == "reasoning_content"  # no chat_template_kwargs: the parser's default thinks
    assert all(kind == "content" for kind, _ in streams[2])


def _chained_streamed(fmt: str) -> tuple[list[dict], list[list], list[dict]]:
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
        sim_deltas += [
            ["tool", t["index"], t["function"]["name"], t["function"]["arguments"]]
            for t in delta.get("tool_calls") or []
        ]
    names = [d[2] for d in sim_deltas if d[0] == "tool" and d[2]]
    calls = [
        (name, json.loads("".join(d[3] for d in sim_deltas if d[0] == "tool" and d[1] == i and not d[2])))
        for i, name in enumerate(names)
    ]
    thinking_pieces = [
        u.text for u in _written(body, settings) if u.kind in ("reasoning", "hidden", "content")
    ]
    case = {
        "kind": "chained",
        "parser": "qwen3",
        "format": fmt,
        "tools": TOOLS,
        "pieces": thinking_pieces + raw_pieces(fmt, calls),
    }
    return [case], [sim_deltas], []


@pytest.mark.parametrize("fmt", CHAINED_FORMATS)
def test_tool_calls_after_thinking_stream_as_sglangs_chained_parsers_make_them(
    fmt: str, refereed: dict
) -> None:
    (sim_deltas,), _, (verdict,) = refereed["chained", fmt]
    names = [d[2] for d in sim_deltas if d[0] == "tool" and d[2]]
    assert len(names) == 2 and sim_deltas[0][0] == "reasoning_content"
    assert sim_deltas == verdict


@pytest.fixture(scope="module")
def refereed(sglang_referee_python: Path) -> dict[tuple[str, str], tuple[list, list, list]]:
    """What the sim streamed for every case of this file, and what sglang's own parsers make of
    the same raw text, all of it through one referee process: {(kind, parser or format):
    (the sim's deltas, its non-streamed messages, sglang's verdicts)}."""
    runs = {("tools", f): _tool_calls_streamed(f) for f in TOOL_FORMATS}
    runs |= {("reasoning", p): _reasoning_streamed(p) for p in REASONING_PARSERS}
    runs |= {("chained", f): _chained_streamed(f) for f in CHAINED_FORMATS}
    cases = [case for run_cases, _, _ in runs.values() for case in run_cases]
    answered = referee(sglang_referee_python, REFEREE, cases)
    assert len(answered) == len(cases)  # a verdict for each case, or the pairing below would shift
    verdicts = iter(answered)
    return {
        key: (streams, plains, [next(verdicts) for _ in run_cases])
        for key, (run_cases, streams, plains) in runs.items()
    }
