"""Checking tool calls against their schemas, and streamed against non-streamed results.

A call is checked the way BFCL's AST checker does it, against the JSON schema the request sent:
the function exists, its arguments are a JSON object, every required parameter is present, no
parameter is unknown, and every value has the declared type and enum (jsonschema does the type
and enum part). An expectation may also pin values: strings match case-insensitively.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from ....server.client import ToolCall


@dataclass
class ExpectedCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)  # values that must match (subset)


def check_call(call: ToolCall, schemas: dict[str, dict[str, Any]]) -> list[str]:
    """Problems with one call against the tools offered (name -> JSON schema of parameters)."""
    label = f"call {call.name!r}" if call.name else f"call #{call.index}"
    if not call.name:
        return [f"{label}: no function name"]
    if call.name not in schemas:
        return [f"{label}: function is not one of the offered tools ({', '.join(sorted(schemas))})"]
    try:
        args = json.loads(call.arguments or "{}")
    except json.JSONDecodeError as exc:
        return [
            f"{label}: arguments are not valid JSON ({exc.msg} at character {exc.pos}): {call.arguments[:200]!r}"
        ]
    if not isinstance(args, dict):
        return [f"{label}: arguments are {type(args).__name__}, not a JSON object"]
    schema = schemas[call.name] or {"type": "object", "properties": {}}
    properties = schema.get("properties") or {}
    problems = []
    missing = [p for p in schema.get("required") or [] if p not in args]
    if missing:
        problems.append(f"{label}: required parameter(s) missing: {', '.join(missing)}")
    unknown = [p for p in args if p not in properties]
    if unknown:
        problems.append(f"{label}: unknown parameter(s): {', '.join(unknown)}")
    # Types, enums, ranges: each property checked on its own so the message names it.
    for key, value in args.items():
        if key not in properties:
            continue
        try:
            jsonschema.validate(value, properties[key])
        except jsonschema.ValidationError as exc:
            problems.append(f"{label}: parameter {key!r}: {exc.message}")
        except jsonschema.SchemaError as exc:  # our own data is wrong: say so, do not blame the server
            problems.append(f"{label}: schema of parameter {key!r} is invalid: {exc.message}")
    return problems


def match_expected(calls: list[ToolCall], expected: list[ExpectedCall]) -> list[str]:
    """Problems matching the calls made with the calls expected (order-free, as parallel calls
    may come in any order)."""
    problems = []
    if len(calls) != len(expected):
        made = ", ".join(str(c.name) for c in calls) or "none"
        want = ", ".join(e.name for e in expected) or "none"
        problems.append(f"expected {len(expected)} call(s) ({want}), got {len(calls)} ({made})")
    remaining = list(calls)
    for exp in expected:
        # Prefer a call whose values match, so two calls of one function pair up correctly.
        same_name = [c for c in remaining if c.name == exp.name]
        if not same_name:
            problems.append(f"no call to {exp.name!r}")
            continue
        pick = next((c for c in same_name if not _value_problems(c, exp)), same_name[0])
        problems.extend(_value_problems(pick, exp))
        remaining.remove(pick)
    return problems


def _value_problems(call: ToolCall, expected: ExpectedCall) -> list[str]:
    try:
        args = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        return [f"call {call.name!r}: arguments are not valid JSON"]
    if not isinstance(args, dict):
        return [f"call {call.name!r}: arguments are not an object"]
    problems = []
    for key, want in expected.arguments.items():
        got = args.get(key)
        if not _same_value(got, want):
            if isinstance(want, str) and len(want) > 200:
                problems.append(
                    f"call {call.name!r}: parameter {key!r} differs from the {len(want)}-character "
                    f"text sent: {_long_difference(got, want)}"
                )
            else:
                problems.append(f"call {call.name!r}: parameter {key!r} is {got!r}, expected {want!r}")
    return problems


def _long_difference(got: Any, want: str) -> str:
    """Where a long string argument went wrong, in a few words (not 2 KB twice)."""
    if not isinstance(got, str):
        return f"got {type(got).__name__}"
    same = next(
        (i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want))
    )
    if len(got) < len(want) and same == len(got):
        return f"only the first {len(got)} characters arrived (its tail of {len(want) - len(got)} was lost)"
    return f"{len(got)} characters, first difference at character {same}: {got[same : same + 40]!r}"


def _same_value(got: Any, want: Any) -> bool:
    if isinstance(want, str) and isinstance(got, str):
        return got.strip().lower() == want.strip().lower()
    if isinstance(want, bool) or isinstance(got, bool):
        return got is want
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        return float(got) == float(want)
    if isinstance(want, list) and isinstance(got, list):
        return len(got) == len(want) and all(_same_value(g, w) for g, w in zip(got, want, strict=True))
    if isinstance(want, dict) and isinstance(got, dict):
        return set(got) == set(want) and all(_same_value(got[k], w) for k, w in want.items())
    return got == want


def canonical_calls(calls: list[ToolCall]) -> list[tuple[str | None, Any]]:
    """Calls as comparable values: (name, parsed arguments), in index order. Arguments that are
    not JSON compare as their raw text."""
    out = []
    for call in sorted(calls, key=lambda c: c.index):
        try:
            args: Any = json.loads(call.arguments or "{}")
        except json.JSONDecodeError:
            args = call.arguments
        out.append((call.name, args))
    return out


def stream_problems(streamed: list[ToolCall]) -> list[str]:
    """What the streaming contract requires of assembled calls: one id per call, ids distinct."""
    problems = []
    for call in streamed:
        if call.ids_seen != 1:
            problems.append(
                f"streamed call #{call.index} ({call.name}) carried {call.ids_seen} distinct ids, expected 1"
            )
    ids = [c.id for c in streamed if c.id]
    if len(ids) != len(set(ids)):
        problems.append(f"streamed calls share an id: {ids}")
    indexes = [c.index for c in streamed]
    if indexes != list(range(len(streamed))):
        problems.append(f"streamed call indexes are {indexes}, expected 0..{len(streamed) - 1}")
    return problems
