"""What a real SGLang server answered, replayed: the responses of SGLang 0.5.17 on an H200
(scripts/gpu-check, tests/data/sglang-real/README.md) through deploytool's own readers
(serverfields, metrics_window, the readiness wait, the endpoint and bench clients) and beside the
reference runtime's shapes, so CI holds the real server's wire with no GPU. The memory planner
against the same starts: tests/test_memory_plan_matches_real_h200.py.

The models had random weights: the text is noise, but every shape, field, counter and status is
the server's own."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import httpx
import pytest
from conftest import serve_app
from sim_settings import FAST

from deploytool.server import metrics_window, serverfields
from deploytool.server.client import EndpointClient
from deploytool.server.facts import parse_prometheus
from deploytool.server.fast_stream import StreamClient
from deploytool.server.readiness import wait_until_ready
from deploytool.sim import SimSettings, serve_in_thread

REAL = Path(__file__).parent / "data" / "sglang-real"


def fixture(plan: str, name: str) -> dict:
    return json.loads((REAL / plan / f"{name}.json").read_text())


def body(plan: str, name: str):
    return json.loads(fixture(plan, name)["body"])


def events(record: dict) -> list:
    """The JSON events of a recorded SSE body (every `data:` line but [DONE])."""
    return [
        json.loads(line[6:])
        for line in record["body"].split("\n")
        if line.startswith("data: ") and line != "data: [DONE]"
    ]


# --- the readers, on the real server's self-description ---------------------------------------


@pytest.mark.parametrize(
    "plan, running, context, pool",
    [
        ("dense", 32, 32768, 36_306_512),
        ("hybrid-mtp", 16, 32768, 28_720_386),
        ("a3b", 8, 262144, 284_583),
        ("a3b-patched", 8, 262144, 367_831),
    ],
)
def test_serverfields_read_the_real_server_info(plan, running, context, pool) -> None:
    info, models = body(plan, "server_info"), body(plan, "v1_models")
    assert info["version"] == "0.5.17"
    assert serverfields.running_limit(info) == (
        running,
        "internal_states[].effective_max_running_requests_per_dp",
    )
    assert serverfields.context_length(models, info) == (context, "/v1/models max_model_len")
    assert serverfields.kv_pool_tokens(info) == pool
    (usage,) = serverfields.memory_usage(info)
    assert usage["token_capacity"] == pool and usage["weight"] > 0 and usage["kvcache"] > 0
    assert serverfields.weight_version(body(plan, "model_info")) == "default"


def test_speculative_fields_and_the_accept_length_window() -> None:
    """NEXTN is reported as EAGLE; the accept length over a window comes from the counters and
    agrees with the server's own cumulative figure (random weights: every draft rejected, 1.0)."""
    info = body("hybrid-mtp", "server_info")
    assert info["speculative_algorithm"] == "EAGLE" and info["speculative_num_draft_tokens"] == 4
    assert info["internal_states"][0]["avg_spec_accept_length"] == 1.0
    before = metrics_window.CounterSnapshot(
        0.0, metrics_window.counters_from(parse_prometheus(fixture("hybrid-mtp", "metrics_before")["body"]))
    )
    after = metrics_window.CounterSnapshot(
        10.0, metrics_window.counters_from(parse_prometheus(fixture("hybrid-mtp", "metrics_after")["body"]))
    )
    window = metrics_window.window(before, after)
    assert window.measured and window.delta(metrics_window.VERIFY) > 1000
    assert window.spec_accept_length == pytest.approx(1.0, abs=0.01)


def test_metrics_counters_deploytool_reads_exist_and_move() -> None:
    for plan in ("dense", "hybrid-mtp"):
        before = parse_prometheus(fixture(plan, "metrics_before")["body"])
        after = parse_prometheus(fixture(plan, "metrics_after")["body"])
        for name in (metrics_window.PROMPT, metrics_window.GENERATED, metrics_window.REQUESTS):
            assert after[name] > before.get(name, 0), (plan, name)
        for gauge in metrics_window.GAUGES:
            assert gauge in after
    # the cached-token counter appears only once a cached token was counted: the dense server
    # reused prefixes; the hybrid one (no_buffer state cache) never did, and the window reads 0
    assert parse_prometheus(fixture("dense", "metrics_after")["body"])[metrics_window.CACHED] > 0
    hybrid = parse_prometheus(fixture("hybrid-mtp", "metrics_after")["body"])
    assert metrics_window.CACHED not in hybrid
    window = metrics_window.window(
        metrics_window.CounterSnapshot(
            0.0,
            metrics_window.counters_from(parse_prometheus(fixture("hybrid-mtp", "metrics_before")["body"])),
        ),
        metrics_window.CounterSnapshot(1.0, metrics_window.counters_from(hybrid)),
    )
    assert window.cached_share == 0.0


# --- the wait for a loading server, on the real start's timeline ----------------------------


class _LoadingReplay:
    """An ASGI app answering each path with what the real server answered it while loading, in
    the recorded order: the timeline notes each change of answer, so the n-th request to a path
    gets its n-th recorded answer, and the last one from then on. The refused connections before
    the server listened are not the app's: the test's socket refuses them until it starts."""

    def __init__(self, timeline: list[dict]):
        self.answers: dict[str, list[dict]] = {}
        for event in timeline:
            if event["status"] is not None:  # a refused connection or a probe's own timeout
                self.answers.setdefault(event["path"], []).append(event)
        self.asked: list[str] = []

    async def __call__(self, scope, receive, send) -> None:
        path = scope["path"]
        self.asked.append(path)
        queue = self.answers.get(path) or [{"status": 404, "content_type": None, "body": ""}]
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        await send(
            {
                "type": "http.response.start",
                "status": answer["status"],
                "headers": [(b"content-type", (answer["content_type"] or "text/plain").encode())],
            }
        )
        await send({"type": "http.response.body", "body": answer["body"].encode()})


@pytest.mark.parametrize("plan", ["dense", "hybrid-mtp", "a3b", "a3b-patched"])
def test_the_wait_for_readiness_follows_the_real_start(plan) -> None:
    """Connections refused while the weights load, /health 503 while the info routes already
    answer 200, then /health 200: deploytool's wait says which of them it is waiting through,
    asks /health only, and is ready at its 200."""
    app = _LoadingReplay(json.loads((REAL / plan / "loading.json").read_text())["events"])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused until the server starts
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    lines: list[str] = []
    with contextlib.ExitStack() as server:

        def progress(line: str) -> None:
            lines.append(line)
            if len(lines) == 1:  # the server starts listening once the wait has met a refused connection
                server.enter_context(serve_app(app, "the loading replay", sock=sock))

        ready = asyncio.run(
            wait_until_ready(
                url,
                timeout_s=60,
                poll_s=0.01,
                progress=progress,
                progress_every_s=0,
                timeout_name="--ready-timeout",
            )
        )
    assert (ready.ready, ready.reachable, ready.status, ready.error) == (True, True, 200, None)
    refused, warming = lines
    assert refused.startswith(f"waiting for {url} to become ready: connection refused")
    assert warming.startswith(f"waiting for {url} to become ready: GET /health answered HTTP 503")
    assert all("--ready-timeout to wait less or more" in line for line in lines)
    assert app.asked == ["/health", "/health"]


# --- the clients, on the real bytes ----------------------------------------------------------


class _Replay(BaseHTTPRequestHandler):
    record: ClassVar[dict] = {}

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        rec = self.record
        payload = rec["body"].encode()
        self.send_response(rec["status"])
        self.send_header("Content-Type", rec["headers"].get("content-type", "application/json"))
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args) -> None:
        pass


def replay(plan: str, name: str, *, stream_client: bool = False):
    """Serve one recorded answer on loopback and send the recorded request through deploytool."""
    record = fixture(plan, name)
    handler = type("Handler", (_Replay,), {"record": record})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    # shutdown() waits for serve_forever to look at its flag, once a poll_interval (0.5 s by default)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    payload = record["request"]["body"]

    async def go():
        if stream_client:
            client = StreamClient(url)
            try:
                return await client.chat(payload, timeout=10)
            finally:
                await client.aclose()
        async with EndpointClient(url, timeout=10) as client:
            return await client.chat(payload)

    try:
        return asyncio.run(go()), record
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("stream_client", [False, True], ids=["EndpointClient", "bench StreamClient"])
@pytest.mark.parametrize(
    "name", ["chat_stream", "chat_thinking_stream", "chat_tools_auto_stream", "chat_thinking_default_stream"]
)
def test_clients_assemble_the_real_stream(name, stream_client) -> None:
    result, record = replay("dense", name, stream_client=stream_client)
    evs = events(record)
    deltas = [c["delta"] for e in evs for c in e["choices"]]
    assert result.ok and result.saw_done and result.error is None
    assert result.content == "".join(d.get("content") or "" for d in deltas)
    assert result.reasoning_content == "".join(d.get("reasoning_content") or "" for d in deltas)
    assert result.finish_reason == "length"
    if (record["request"]["body"].get("stream_options") or {}).get("include_usage"):
        assert result.usage == evs[-1]["usage"] and evs[-1]["choices"] == []
    if name == "chat_thinking_stream":  # thinking on: everything is reasoning, counted as such
        assert result.content == "" and result.reasoning_content
        assert result.usage["reasoning_tokens"] == result.usage["completion_tokens"] == 24
    if name == "chat_thinking_default_stream":  # the server's default kwargs turned thinking off
        assert result.reasoning_content == "" and result.content


def test_a_named_tool_call_is_assembled_from_the_real_deltas() -> None:
    """0.5.17 constrained to a named function and cut by max_tokens: the name and id in the first
    delta, the arguments in later ones with id null."""
    result, record = replay("dense", "chat_tools_named_stream")
    (call,) = result.tool_calls
    assert call.name == "get_stock_price" and call.id.startswith("call_") and call.ids_seen == 1
    deltas = [t for e in events(record) for c in e["choices"] for t in c["delta"].get("tool_calls") or []]
    assert deltas[0]["function"]["name"] == "get_stock_price" and all(d["id"] is None for d in deltas[1:])
    assert call.arguments == "".join(d["function"]["arguments"] for d in deltas)
    assert result.finish_reason == "length"


@pytest.mark.parametrize(
    "name, status, words",
    [
        ("error_context_overflow_plain", 400, "longer than the model's context length"),
        ("error_context_overflow_stream", 400, "longer than the model's context length"),
        ("error_max_tokens_overflow", 400, "max_completion_tokens is too large"),
        ("error_tool_choice_absent", 400, "not found in tools list"),
        ("error_image_to_text_model", 400, "only supports text input"),
        ("auth_chat_no_key", 401, "Unauthorized"),
    ],
)
def test_error_bodies_land_in_the_result(name, status, words) -> None:
    result, _ = replay("dense", name)
    assert not result.ok and result.status == status and words in result.error


# --- the reference runtime beside the real server --------------------------------------------

SIM = {**FAST, "context_length": 32768, "max_total_tokens": 10_000_000}


def test_the_sim_answers_what_the_real_server_answered_to_bad_requests() -> None:
    """Status and body of each refusal the sim can make, against the real server's."""
    cases = [
        "error_max_tokens_overflow",
        "error_context_overflow_plain",
        "error_unknown_route",
        "error_wrong_method",
        "error_tool_choice_absent",
        "error_max_tokens_zero",
    ]
    with (
        serve_in_thread(SimSettings(**SIM, api_key="k"), wait_ready=True) as sim,
        httpx.Client(base_url=sim.url, headers={"Authorization": "Bearer k"}, timeout=30) as client,
    ):
        for name in cases:
            record = fixture("dense", name)
            req = record["request"]
            sent = req.get("body") or {}
            if name == "error_context_overflow_plain":
                sent = {**sent, "messages": [{"role": "user", "content": "lorem " * 40000}]}
            got = client.request(req["method"], req["path"], json=sent if req["method"] == "POST" else None)
            real = json.loads(record["body"])
            assert got.status_code == record["status"], name
            if "message" in real:
                # the token counts differ (the sim has its own token rule); the words do not
                assert got.json()["type"] == real["type"] and got.json()["code"] == real["code"], name
                assert real["message"].split(":")[0].split("(")[0] in got.json()["message"], name
            elif "detail" in real:
                assert got.json() == real, name
            else:  # max_tokens 0: an empty answer cut at once
                assert (
                    got.json()["choices"][0]["finish_reason"]
                    == real["choices"][0]["finish_reason"]
                    == "length"
                )
                assert (
                    got.json()["choices"][0]["message"]["content"]
                    == real["choices"][0]["message"]["content"]
                    == ""
                )
                assert got.json()["usage"]["completion_tokens"] == 0
        for name in ("auth_models_no_key", "auth_server_info_no_key"):
            record = fixture("dense", name)
            got = httpx.get(sim.url + record["request"]["path"])
            assert (got.status_code, got.json()) == (record["status"], json.loads(record["body"])), name


def test_the_sim_streams_the_real_chunk_shapes() -> None:
    """Key sets of the role chunk, a text chunk and the usage chunk; the metric names and
    label names deploytool reads."""
    real = events(fixture("dense", "chat_stream"))
    with (
        serve_in_thread(SimSettings(**SIM), wait_ready=True) as sim,
        httpx.Client(base_url=sim.url, timeout=30) as client,
    ):
        with client.stream(
            "POST",
            "/v1/chat/completions",
            json={
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 8,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        ) as response:
            mine = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
        metrics = client.get("/metrics").text
    assert set(mine[0]) == set(real[0]) and mine[0]["choices"][0]["delta"] == real[0]["choices"][0]["delta"]
    assert set(mine[1]["choices"][0]["delta"]) == set(real[1]["choices"][0]["delta"])
    assert set(mine[-1]) == set(real[-1]) and mine[-1]["choices"] == real[-1]["choices"] == []
    assert set(mine[-1]["usage"]) <= set(real[-1]["usage"]) | {"completion_tokens_details"}
    real_metrics = parse_prometheus(fixture("dense", "metrics_after")["body"])
    for name in (
        metrics_window.PROMPT,
        metrics_window.GENERATED,
        metrics_window.REQUESTS,
        *metrics_window.GAUGES,
    ):
        assert name in real_metrics and name in parse_prometheus(metrics), name


# --- SGLang 0.5.23's own protocol models, on the 0.5.17 server's bodies ------------------------

VALIDATE_REAL = r"""
import json, sys
from sglang.srt.entrypoints.openai import protocol as p
MODELS = {"ChatCompletionResponse": p.ChatCompletionResponse, "ChatCompletionStreamResponse": p.ChatCompletionStreamResponse,
          "ErrorResponse": p.ErrorResponse, "ModelList": p.ModelList}
out = []
for case in json.load(sys.stdin):
    try:
        MODELS[case["model"]].model_validate(case["body"])
        out.append({"name": case["name"], "problem": None})
    except Exception as exc:
        out.append({"name": case["name"], "problem": f"{type(exc).__name__}: {exc}"[:400]})
print(json.dumps(out))
"""


def test_the_pinned_sglang_models_accept_every_recorded_body(sglang_referee_python: Path) -> None:
    """What deploytool's wire assumptions were checked against (0.5.23's protocol models, in the
    referee environment) accepts every body the real 0.5.17 server sent: plain answers, every
    stream chunk, the error bodies and the model list."""
    from sglang_referee import referee

    cases = []
    for plan in ("dense", "hybrid-mtp"):
        for f in sorted((REAL / plan).glob("*.json")):
            record = json.loads(f.read_text())
            if "request" not in record or not isinstance(record.get("body"), str) or not record["body"]:
                continue
            name = f"{plan}/{f.stem}"
            ctype = (record.get("headers") or {}).get("content-type") or ""
            if ctype.startswith("text/event-stream"):
                cases += [
                    {"name": f"{name}#{i}", "model": "ChatCompletionStreamResponse", "body": e}
                    for i, e in enumerate(events(record))
                    if "error" not in e
                ]
            elif ctype.startswith("application/json") and record["request"]["path"] == "/v1/chat/completions":
                data = json.loads(record["body"])
                model = (
                    "ErrorResponse"
                    if data.get("object") == "error"
                    else "ChatCompletionResponse"
                    if data.get("object") == "chat.completion"
                    else None
                )
                if model:
                    cases.append({"name": name, "model": model, "body": data})
            elif f.stem == "v1_models":
                cases.append({"name": name, "model": "ModelList", "body": json.loads(record["body"])})
    assert len(cases) > 300
    problems = [r for r in referee(sglang_referee_python, VALIDATE_REAL, cases) if r["problem"]]
    assert problems == []
