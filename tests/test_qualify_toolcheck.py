"""Tool-call checking against schemas, expected values, and streamed delta assembly."""

from __future__ import annotations

import json

from deploytool.qualify.suites.tools import load_cases
from deploytool.qualify.suites.tools.toolcheck import (
    ExpectedCall,
    canonical_calls,
    check_call,
    match_expected,
    stream_problems,
)
from deploytool.server.chat_result import ChatResult, ToolCall
from deploytool.server.chat_stream import ChatStream

TOOLS, CASES = load_cases()
SCHEMAS = {name: spec["parameters"] for name, spec in TOOLS.items()}


def call(name: str, args: object, index: int = 0, raw: str | None = None) -> ToolCall:
    return ToolCall(
        index=index,
        id=f"call_{index}",
        name=name,
        arguments=raw if raw is not None else json.dumps(args),
        ids_seen=1,
    )


def test_a_correct_call_has_no_problems() -> None:
    assert check_call(call("get_weather", {"city": "Paris", "unit": "celsius"}), SCHEMAS) == []


def test_each_kind_of_wrong_call_is_named() -> None:
    assert "not one of the offered tools" in check_call(call("get_wether", {"city": "Paris"}), SCHEMAS)[0]
    assert "not valid JSON" in check_call(call("get_weather", None, raw="{'city': 'Paris'"), SCHEMAS)[0]
    assert "required parameter(s) missing: city" in check_call(call("get_weather", {}), SCHEMAS)[0]
    unknown = check_call(call("get_weather", {"city": "Paris", "country": "FR"}), SCHEMAS)
    assert unknown == ["call 'get_weather': unknown parameter(s): country"]
    enum = check_call(call("get_weather", {"city": "Paris", "unit": "kelvin"}), SCHEMAS)
    assert len(enum) == 1 and "'unit'" in enum[0] and "kelvin" in enum[0]
    wrong_type = check_call(
        call(
            "search_flights", {"origin": "SFO", "destination": "JFK", "date": "May 14", "passengers": "two"}
        ),
        SCHEMAS,
    )
    assert len(wrong_type) == 1 and "'passengers'" in wrong_type[0] and "integer" in wrong_type[0]
    assert "not a JSON object" in check_call(call("get_weather", None, raw="[1]"), SCHEMAS)[0]


def test_expected_values_and_counts() -> None:
    expected = [
        ExpectedCall("get_weather", {"city": "Paris"}),
        ExpectedCall("get_weather", {"city": "Tokyo"}),
    ]
    # parallel calls may come in any order; strings compare case-insensitively
    assert (
        match_expected(
            [call("get_weather", {"city": "tokyo"}, 0), call("get_weather", {"city": "Paris"}, 1)], expected
        )
        == []
    )
    one = match_expected([call("get_weather", {"city": "Paris"})], expected)
    assert any("expected 2 call(s)" in p for p in one)
    wrong = match_expected(
        [call("get_weather", {"city": "Paris"}, 0), call("get_weather", {"city": "Rome"}, 1)], expected
    )
    assert wrong == ["call 'get_weather': parameter 'city' is 'Rome', expected 'Tokyo'"]
    assert match_expected([], []) == []
    assert any(
        "no call to 'get_stock_price'" in p
        for p in match_expected([call("get_weather", {"city": "X"})], [ExpectedCall("get_stock_price")])
    )


def test_streamed_deltas_are_assembled_per_index() -> None:
    """Argument fragments of two parallel calls, interleaved, arrive as one call each: fed as
    SSE bytes, split at arbitrary points, through the walker both stream readers use."""
    result = ChatResult(streamed=True)
    deltas = [
        {
            "index": 0,
            "id": "call_a",
            "type": "function",
            "function": {"name": "get_weather", "arguments": ""},
        },
        {
            "index": 1,
            "id": "call_b",
            "type": "function",
            "function": {"name": "get_weather", "arguments": ""},
        },
        {"index": 0, "function": {"arguments": '{"city": '}},
        {"index": 1, "function": {"arguments": '{"city": "To'}},
        {"index": 0, "function": {"arguments": '"Paris"}'}},
        {"index": 1, "function": {"arguments": 'kyo"}'}},
    ]
    chunks = [
        {"choices": [{"index": 0, "delta": {"tool_calls": [piece]}, "finish_reason": None}]}
        for piece in deltas
    ]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    body = "".join(f"data: {json.dumps(c)}\r\n\r\n" for c in chunks).encode() + b"data: [DONE]\n\n"
    stream = ChatStream(result)
    over = [stream.feed(body[i : i + 37], float(i)) for i in range(0, len(body), 37)]
    stream.finish()
    assert over[-1] is True and not any(over[:-1]) and result.saw_done and result.error is None
    assert canonical_calls(result.tool_calls) == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Tokyo"}),
    ]
    assert (
        result.finish_reason == "tool_calls"
        and result.chunks == len(chunks)
        and result.answer_chunks == len(deltas)
    )
    assert stream_problems(result.tool_calls) == []


def test_stream_problems_catch_repeated_or_shared_ids() -> None:
    a = ToolCall(index=0, id="x", name="f", arguments="{}", ids_seen=2)
    b = ToolCall(index=1, id="x", name="f", arguments="{}", ids_seen=1)
    problems = stream_problems([a, b])
    assert any("2 distinct ids" in p for p in problems)
    assert any("share an id" in p for p in problems)


def test_every_case_file_entry_is_consistent() -> None:
    """The shipped cases offer known tools, and their expected values pass their own schema."""
    categories = {c["category"] for c in CASES}
    assert {"simple", "multiple", "parallel", "irrelevance", "round-trip"} <= categories
    for case in CASES:
        for i, exp in enumerate(case.get("expect") or []):
            assert exp["name"] in case["offer"], case["id"]
            fake = call(exp["name"], exp.get("arguments") or {}, i)
            problems = [p for p in check_call(fake, SCHEMAS) if "required" not in p]
            assert problems == [], (case["id"], problems)
