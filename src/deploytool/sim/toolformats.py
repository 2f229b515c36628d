"""Tool calls as the simulated model writes them, and as SGLang's parser streams them.

A real server streams what its tool-call parser (--tool-call-parser) makes of the model's raw
text, chunk by chunk. The sim writes the raw text of each format in the pieces below
(`raw_pieces`: what the model emits, token group by token group) and streams, after the
function name, exactly the argument deltas SGLang 0.5.23's parser yields for those pieces
(`argument_deltas`). tests/test_sim_conformance_parsers.py feeds `raw_pieces` through sglang's
own FunctionCallParser and holds the sim to its output:

  qwen25      (sglang/srt/function_call/qwen25_detector.py, base_format_detector.py):
              `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`; one key/value
              piece at a time, the parser lags one piece: `{"k1": v1`, `, "k2": v2`, ..., the
              last with the closing `}` (one parameter: `{"k": v}`).
  qwen3_coder (qwen3_coder_detector.py): `<function=NAME>` and `<parameter=K>V</parameter>`;
              the arguments stream as `{`, then one whole `"key": value` per parameter
              (`, ` before all but the first), then `}`.
  glm47       (glm47_moe_detector.py): `NAME<arg_key>K</arg_key><arg_value>V</arg_value>`;
              `{`, then per parameter `"key": ` and the value (a string as its opening quote
              and text, then the closing quote), `, ` between parameters, then `}`.
"""

from __future__ import annotations

import json
from typing import Any

FORMATS = ("qwen25", "qwen3_coder", "glm47")


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def parse_arguments(arguments: str) -> dict[str, Any] | None:
    """The arguments as an object, or None when they are not one (the bad_tool_json fault)."""
    try:
        value = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def raw_value(value: Any) -> str:
    """A parameter value as the XML-style formats write it: strings bare, the rest as JSON."""
    return value if isinstance(value, str) else _dumps(value)


def raw_pieces(fmt: str, calls: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The model's raw output for these calls, in the pieces it is generated in."""
    out: list[str] = []
    for name, args in calls:
        if fmt == "qwen25":
            out += ["<tool_call>\n", '{"name": ' + _dumps(name) + ', "arguments": ']
            items = list(args.items())
            out += [
                ("{" if i == 0 else ", ") + _dumps(k) + ": " + _dumps(v) for i, (k, v) in enumerate(items)
            ]
            out += ["}" if items else "{}", "}\n</tool_call>"]
        elif fmt == "qwen3_coder":
            out += ["<tool_call>\n", f"<function={name}>\n"]
            for k, v in args.items():
                out += [f"<parameter={k}>\n", raw_value(v) + "\n", "</parameter>\n"]
            out += ["</function>\n", "</tool_call>"]
        elif fmt == "glm47":
            out += ["<tool_call>", name]
            for k, v in args.items():
                out += ["<arg_key>", k, "</arg_key>", "<arg_value>", raw_value(v), "</arg_value>"]
            out += ["</tool_call>"]
        else:
            raise ValueError(f"unknown tool-call format {fmt!r} (known: {', '.join(FORMATS)})")
    return out


def argument_deltas(fmt: str, args: dict[str, Any]) -> list[str]:
    """The `arguments` fragments SGLang streams after a call's name delta (see the module doc)."""
    pairs = [_dumps(k) + ": " + _dumps(v) for k, v in args.items()]
    if fmt == "qwen25":
        if len(pairs) <= 1:
            return ["{" + "".join(pairs) + "}"]
        return ["{" + pairs[0], *(", " + p for p in pairs[1:-1]), ", " + pairs[-1] + "}"]
    if fmt == "qwen3_coder":
        return ["{", *((", " if i else "") + p for i, p in enumerate(pairs)), "}"]
    if fmt == "glm47":
        if not args:
            return ["{}"]
        out = ["{"]
        for i, (k, v) in enumerate(args.items()):
            if i:
                out.append(", ")
            out.append(_dumps(k) + ": ")
            out += [_dumps(v)[:-1], '"'] if isinstance(v, str) else [_dumps(v)]
        return [*out, "}"]
    raise ValueError(f"unknown tool-call format {fmt!r} (known: {', '.join(FORMATS)})")


def raw_text(fmt: str, calls: list[tuple[str, dict[str, Any]]]) -> str:
    return "".join(raw_pieces(fmt, calls))
