"""Conformance (a): every response shape the sim serves, checked by sglang 0.5.23's own pydantic
models (sglang/srt/entrypoints/openai/protocol.py) in the referee environment. A shape passes
when the model accepts it AND every key the sim sends is one the model has, with the value the
model would serialize (so no invented field, no coerced type, nothing the model would drop)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from sglang_referee import referee

from deploytool.sim.server import serve_in_thread
from deploytool.sim.settings import SimSettings

CHAT = "/v1/chat/completions"
BASE = {"startup_seconds": 0.0, "decode_tps": 20000.0, "prefill_tps": 1e8, "log_requests": False}
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
    }
]

VALIDATE = r'''
import json, sys
from pydantic import BaseModel
from sglang.srt.entrypoints.openai import protocol as p
MODELS = {"ChatCompletionResponse": p.ChatCompletionResponse, "ChatCompletionStreamResponse": p.ChatCompletionStreamResponse,
          "ErrorResponse": p.ErrorResponse, "ModelList": p.ModelList, "ModelCard": p.ModelCard, "UsageInfo": p.UsageInfo}

def extra(sent, dumped, path):
    """Keys the sim sends that sglang's model does not serialize, or serializes differently."""
    out = []
    if isinstance(sent, dict):
        if not isinstance(dumped, dict):
            return [f"{path}: sglang has {dumped!r}"]
        for key, value in sent.items():
            if key not in dumped:
                out.append(f"{path}.{key}: not a field of sglang's model")
            else:
                out += extra(value, dumped[key], f"{path}.{key}")
    elif isinstance(sent, list):
        if not isinstance(dumped, list) or len(sent) != len(dumped):
            return [f"{path}: sglang has {dumped!r}"]
        for i, (a, b) in enumerate(zip(sent, dumped)):
            out += extra(a, b, f"{path}[{i}]")
    elif sent != dumped or type(sent) is not type(dumped):
        out.append(f"{path}: sim sends {sent!r}, sglang's model gives {dumped!r}")
    return out

results = []
for case in json.load(sys.stdin):
    try:
        model = MODELS[case["model"]].model_validate(case["body"])
        problems = extra(case["body"], json.loads(model.model_dump_json()), case["model"])
    except Exception as exc:
        problems = [f"{type(exc).__name__}: {exc}"[:500]]
    results.append({"name": case["name"], "problems": problems})
print(json.dumps(results))
'''


def _sse(client: httpx.Client, body: dict[str, Any]) -> list[dict[str, Any]]:
    with client.stream("POST", CHAT, json={**body, "stream": True}) as response:
        assert response.status_code == 200
        return [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]


def _collect() -> list[dict[str, Any]]:
    """Every shape the sim serves, from live sims, labelled with the sglang model that describes it."""
    cases: list[dict[str, Any]] = []

    def add(name: str, model: str, body: Any) -> None:
        cases.append({"name": name, "model": model, "body": body})

    configs = {
        "default (qwen3 thinking, no cache report)": dict(BASE),
        "cache report, thinking off": dict(
            BASE, enable_cache_report=True, default_chat_template_kwargs='{"enable_thinking": false}'
        ),
        "qwen3_coder": dict(BASE, tool_call_parser="qwen3_coder"),
        "glm47 + glm45": dict(BASE, tool_call_parser="glm47", reasoning_parser="glm45"),
    }
    for label, settings in configs.items():
        with (
            serve_in_thread(SimSettings(**settings), wait_ready=True) as sim,
            httpx.Client(base_url=sim.url, timeout=30) as client,
        ):
            add(f"{label}: /v1/models", "ModelList", client.get("/v1/models").json())
            add(f"{label}: /v1/models/ID", "ModelCard", client.get("/v1/models/sim-model").json())
            for kind, body in (
                ("text", {"messages": [{"role": "user", "content": "Hello there"}]}),
                (
                    "thinking on",
                    {
                        "messages": [{"role": "user", "content": "Hello"}],
                        "chat_template_kwargs": {"enable_thinking": True},
                    },
                ),
                (
                    "cut by max_tokens",
                    {"messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 3},
                ),
                (
                    "tool call",
                    {
                        "messages": [{"role": "user", "content": "Weather in Lisbon for 3 days?"}],
                        "tools": TOOLS,
                    },
                ),
                (
                    "parallel tool calls",
                    {
                        "messages": [{"role": "user", "content": "Weather in Oslo and Rome, 2 days"}],
                        "tools": TOOLS,
                    },
                ),
            ):
                body = {"model": "sim-model", **body}
                add(
                    f"{label}: {kind}, non-streamed",
                    "ChatCompletionResponse",
                    client.post(CHAT, json=body).json(),
                )
                streamed = _sse(client, {**body, "stream_options": {"include_usage": True}})
                for i, chunk in enumerate(streamed):
                    add(f"{label}: {kind}, chunk {i}", "ChatCompletionStreamResponse", chunk)
                assert streamed[-1]["choices"] == [] and streamed[-1]["usage"]
            bad = client.post(CHAT, json={"model": "sim-model", "messages": []})
            add(f"{label}: 400 body", "ErrorResponse", bad.json())
            add(f"{label}: 404 body", "ErrorResponse", client.get("/v1/models/nope").json())
    # errors from the other paths: start-up, an injected 500, the streamed KV-pool overflow
    with serve_in_thread(SimSettings(**dict(BASE, startup_seconds=30))) as sim:
        add(
            "503 while starting",
            "ErrorResponse",
            httpx.post(sim.url + CHAT, json={"messages": [{"role": "user", "content": "x"}]}).json(),
        )
    with serve_in_thread(SimSettings(**BASE, faults=("http_500_every=1",)), wait_ready=True) as sim:
        add(
            "500 fault",
            "ErrorResponse",
            httpx.post(sim.url + CHAT, json={"messages": [{"role": "user", "content": "x"}]}).json(),
        )
    with serve_in_thread(
        SimSettings(**BASE, context_length=4000, max_total_tokens=1000), wait_ready=True
    ) as sim:
        with (
            httpx.Client(base_url=sim.url, timeout=30) as client,
            client.stream(
                "POST", CHAT, json={"messages": [{"role": "user", "content": "word " * 1500}], "stream": True}
            ) as response,
        ):
            events = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]" and len(events) == 2
        add("streamed KV overflow error event", "ErrorResponse", json.loads(events[0])["error"])
    return cases


@pytest.fixture(scope="module")
def verdicts(sglang_referee_python: Path) -> dict[str, list[str]]:
    cases = _collect()
    # A negative control: the referee must refuse a shape sglang does not serve.
    broken = json.loads(json.dumps(next(c for c in cases if c["model"] == "ChatCompletionResponse")))
    broken["name"] = "control: finish_reason 'done', invented field"
    broken["body"]["choices"][0]["finish_reason"] = "done"
    broken["body"]["sim_only"] = 1
    results = referee(sglang_referee_python, VALIDATE, [*cases, broken])
    return {r["name"]: r["problems"] for r in results}


def test_every_response_shape_the_sim_serves_is_one_sglang_serves(verdicts: dict[str, list[str]]) -> None:
    shapes = {name: problems for name, problems in verdicts.items() if not name.startswith("control")}
    assert len(shapes) > 100  # every chunk of every stream, in four configurations
    failing = {name: problems for name, problems in shapes.items() if problems}
    assert not failing, json.dumps(failing, indent=1)[:4000]


def test_the_referee_refuses_a_shape_sglang_does_not_serve(verdicts: dict[str, list[str]]) -> None:
    (problems,) = [p for name, p in verdicts.items() if name.startswith("control")]
    assert problems and "finish_reason" in " ".join(problems)
