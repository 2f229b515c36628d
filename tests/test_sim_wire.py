"""deploytool.sim: wire format, lifecycle, timing and capacity, over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import free_port

from deploytool.sim import SimSettings, count_tokens, serve_in_thread
from deploytool.sim.tokens import fragments

FAST = {
    "startup_seconds": 0.0,
    "decode_tps": 5000.0,
    "prefill_tps": 1e7,
    "log_requests": False,
    "default_chat_template_kwargs": '{"enable_thinking": false}',
    "enable_metrics": True,
    "enable_cache_report": True,
}
CHAT = "/v1/chat/completions"


def chat_body(text: str = "Hello there, simulator.", **extra: Any) -> dict[str, Any]:
    return {"model": "sim-model", "messages": [{"role": "user", "content": text}], **extra}


def sse_events(client: httpx.Client, body: dict[str, Any]) -> list[Any]:
    """All SSE payloads of a streamed chat: parsed JSON objects, and the literal '[DONE]'."""
    events: list[Any] = []
    with client.stream("POST", CHAT, json={**body, "stream": True}) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        raw = "".join(resp.iter_text())
    for block in raw.split("\n\n"):
        if not block.strip():
            continue
        assert block.startswith("data: "), block
        payload = block[len("data: ") :]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


@pytest.fixture(scope="module")
def sim() -> Iterator[Any]:
    with serve_in_thread(SimSettings(**FAST), wait_ready=True) as handle:
        yield handle


@pytest.fixture(scope="module")
def client(sim: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sim.url, timeout=30) as c:
        yield c


# --- info endpoints -----------------------------------------------------------------------------


def test_models_lists_the_served_model(client: httpx.Client) -> None:
    body = client.get("/v1/models").json()
    assert body["object"] == "list"
    (card,) = body["data"]
    assert card["id"] == card["root"] == "sim-model"
    assert card["object"] == "model" and card["owned_by"] == "sglang"
    assert card["max_model_len"] == 262144
    assert isinstance(card["created"], int)


def test_server_info_reports_settings(client: httpx.Client, sim: Any) -> None:
    info = client.get("/get_server_info").json()
    assert client.get("/server_info").json().keys() == info.keys()
    assert info["simulator"] is True
    assert info["version"].startswith("sim-")
    assert info["served_model_name"] == "sim-model"
    # flags that were not given are null, as SGLang's resolved ServerArgs report them
    assert info["context_length"] is None and info["max_running_requests"] is None
    assert info["max_total_num_tokens"] == 300000
    assert info["chunked_prefill_size"] == 8192
    assert info["speculative_algorithm"] is None and info["speculative_num_steps"] is None
    assert info["tp_size"] == 1 and info["dp_size"] == 1 and info["port"] == sim.port
    (state,) = info["internal_states"]
    assert state["effective_max_running_requests_per_dp"] == 8
    assert "avg_spec_accept_length" not in state  # only with speculative decoding
    assert state["memory_usage"]["token_capacity"] == 300000 and "decode" in state["memory_usage"]["graph"]
    assert isinstance(state["last_gen_throughput"], float)
    assert {"cuda_graph_max_bs_decode", "disable_decode_cuda_graph"} <= info.keys()
    assert info["sim_settings"]["decode_tps"] == 5000.0


def test_server_info_reports_flags_that_were_given() -> None:
    settings = SimSettings.from_env_and_args(
        [
            "--max-running-requests",
            "8",
            "--context-length",
            "262144",
            "--dp-size",
            "2",
            "--startup-seconds",
            "0",
            "--no-log-requests",
        ],
        env={},
    )
    with serve_in_thread(settings, wait_ready=True) as handle:
        info = httpx.get(handle.url + "/server_info").json()
    assert info["max_running_requests"] == 8 and info["context_length"] == 262144
    assert [s["effective_max_running_requests_per_dp"] for s in info["internal_states"]] == [8, 8]


def test_speculative_settings_are_reported() -> None:
    with serve_in_thread(SimSettings(**FAST, spec_accept_length=3.2)) as handle:
        info = httpx.get(handle.url + "/get_server_info").json()
        metrics = httpx.get(handle.url + "/metrics").text
    assert info["speculative_algorithm"] == "EAGLE" and info["speculative_num_steps"] == 3
    assert info["internal_states"][0]["avg_spec_accept_length"] == 3.2
    assert (
        'sglang:spec_accept_length{model_name="sim-model",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0"} 3.2'
        in metrics
    )
    assert "sglang:spec_verify_calls_total{" in metrics


def test_model_info(client: httpx.Client) -> None:
    info = client.get("/get_model_info").json()
    assert client.get("/model_info").json() == info
    assert info["weight_version"] == "default" and info["reasoning_parser"] == "qwen3"
    assert info["tool_call_parser"] == "qwen25" and info["architectures"] == ["DeploytoolSimulator"]
    assert info["has_image_understanding"] is True and info["model_type"] == "simulator"


def test_metrics_prometheus_text(client: httpx.Client) -> None:
    client.post(CHAT, json=chat_body("count me"))
    resp = client.get("/metrics")
    assert resp.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = resp.text
    for name in (
        "sglang:prompt_tokens_total",
        "sglang:generation_tokens_total",
        "sglang:num_requests_total",
        "sglang:num_running_reqs",
        "sglang:spec_accept_length",
        "sglang:token_usage",
        "sglang:cache_hit_rate",
    ):
        line = next(row for row in text.splitlines() if row.startswith(name + "{"))
        assert 'model_name="sim-model"' in line
        float(line.rsplit(" ", 1)[1])
    requests = float(
        next(row for row in text.splitlines() if row.startswith("sglang:num_requests_total")).split()[-1]
    )
    assert requests >= 1
    assert "# TYPE sglang:time_to_first_token_seconds histogram" in text


def test_unknown_route_is_404_json(client: httpx.Client) -> None:
    # FastAPI's own bodies, as a real SGLang 0.5.17 server answered them
    # (tests/data/sglang-real/dense/error_unknown_route.json, error_wrong_method.json)
    resp = client.get("/v1/nothing-here")
    assert resp.status_code == 404 and resp.json() == {"detail": "Not Found"}
    wrong = client.get(CHAT)
    assert wrong.status_code == 405 and wrong.json() == {"detail": "Method Not Allowed"}


# --- health and start-up ------------------------------------------------------------------------


def test_health_is_503_until_startup_finished() -> None:
    # The simulated start-up cannot end before STARTUP s from `started`: an answer that arrived
    # before then must be the starting server's. A loaded machine can delay the probes past the
    # end of the start-up; those answers are not the starting server's, so only the ones the clock
    # puts inside it are held to 503, and the start-up is long enough that on any machine that can
    # run the suite the first probe falls inside it.
    startup = 3.0
    started = time.monotonic()
    with serve_in_thread(SimSettings(**{**FAST, "startup_seconds": startup})) as handle:

        def while_starting(response: httpx.Response) -> bool:
            return time.monotonic() - started < startup

        starting = httpx.get(handle.url + "/health")
        assert while_starting(starting), (
            "the first probe came after the simulated start-up: nothing was checked"
        )
        assert starting.status_code == 503 and starting.content == b""  # SGLang: an empty 503
        generate = httpx.get(handle.url + "/health_generate")
        assert generate.status_code == 503 or not while_starting(generate)
        early = httpx.post(handle.url + CHAT, json=chat_body())
        if while_starting(early):
            assert early.status_code == 503 and early.json()["object"] == "error"
        assert httpx.get(handle.url + "/v1/models").status_code == 200  # info routes work meanwhile
        handle.wait_ready(timeout=10)
        assert time.monotonic() - started >= startup
        assert httpx.get(handle.url + "/health_generate").status_code == 200


def test_nothing_listens_while_weights_load_then_503_then_200() -> None:
    # Each phase lasts 3 s: the first probe must land in the load and one of the 50 ms polls in
    # the start-up, which a loaded two-core machine (four workers) did not always allow at
    # 0.8 s and 0.5 s. The order of what the probes saw is the rule; the clock only spaces it.
    # One client keeping no connection: each probe opens its own, as httpx.get does, without
    # loading a TLS context per probe as httpx.get does (~120 probes: most of this test's CPU).
    with (
        serve_in_thread(SimSettings(**{**FAST, "load_seconds": 3.0, "startup_seconds": 3.0})) as handle,
        httpx.Client(timeout=2, limits=httpx.Limits(max_keepalive_connections=0)) as probe,
    ):
        with pytest.raises(httpx.ConnectError):  # refused, as before SGLang's HTTP server starts
            probe.get(handle.url + "/health")
        deadline = time.monotonic() + 30
        statuses = []
        while time.monotonic() < deadline and statuses[-1:] != [200]:
            try:
                statuses.append(probe.get(handle.url + "/health").status_code)
            except httpx.ConnectError:
                statuses.append("refused")
            time.sleep(0.05)
    assert statuses[0] == "refused" and 503 in statuses and statuses[-1] == 200
    # never back: refused, then 503, then 200
    phases = [{"refused": 0, 503: 1, 200: 2}[s] for s in statuses]
    assert phases == sorted(phases), statuses


def test_serve_in_thread_picks_free_ports_and_stops() -> None:
    a = serve_in_thread(SimSettings(**FAST))
    b = serve_in_thread(SimSettings(**FAST))
    try:
        assert a.port != b.port and a.url.startswith("http://127.0.0.1:")
        assert httpx.get(a.url + "/health").status_code == 200
    finally:
        a.stop()
        b.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(a.url + "/health", timeout=2)


# --- chat: non-streaming and streaming ----------------------------------------------------------


def test_non_streaming_shape(client: httpx.Client) -> None:
    body = client.post(CHAT, json=chat_body("Hello there, simulator.")).json()
    assert set(body) == {"id", "object", "created", "model", "choices", "usage", "metadata"}
    assert body["metadata"] == {"weight_version": "default"}
    assert body["object"] == "chat.completion" and body["model"] == "sim-model"
    (choice,) = body["choices"]
    assert choice["index"] == 0 and choice["finish_reason"] == "stop"
    assert choice["logprobs"] is None and choice["matched_stop"] is None
    msg = choice["message"]
    assert msg["role"] == "assistant" and msg["reasoning_content"] is None and "tool_calls" not in msg
    assert msg["content"] == (
        "Simulator reply: I received 9 tokens; the last user message was: 'Hello there, simulator.'"
    )
    usage = body["usage"]
    assert usage["prompt_tokens"] == 4 + count_tokens("Hello there, simulator.") == 9
    assert usage["completion_tokens"] == count_tokens(msg["content"])
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens_details"] == {"cached_tokens": 0}
    assert usage["reasoning_tokens"] == 0 and usage["completion_tokens_details"] is None


def test_streaming_shape_matches_non_streaming(client: httpx.Client) -> None:
    body = chat_body("Tell me something about streams.", stream_options={"include_usage": True})
    plain = client.post(CHAT, json=body).json()
    events = sse_events(client, body)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "sim-model" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    usage_chunk, final = chunks[-1], chunks[-2]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["total_tokens"] > 0
    assert final["choices"][0]["finish_reason"] == "stop"
    assert final["choices"][0]["delta"] == {"role": None, "content": None, "reasoning_content": None}
    # every text delta carries reasoning_content (null when empty), as sglang's msgspec encoder writes it
    assert all(c["choices"][0]["delta"]["reasoning_content"] is None for c in chunks[:-1])
    pieces = [c["choices"][0]["delta"]["content"] for c in chunks[1:-2]]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-2])
    assert "".join(pieces) == plain["choices"][0]["message"]["content"]
    assert len(pieces) == usage_chunk["usage"]["completion_tokens"] == plain["usage"]["completion_tokens"]
    assert all(0 < len(p) <= 40 for p in pieces)  # one token (a word or a sign) per chunk


def test_streaming_without_usage_has_no_usage_chunk(client: httpx.Client) -> None:
    events = sse_events(client, chat_body("short"))
    assert events[-1] == "[DONE]"
    assert all(e["choices"] for e in events[:-1])


def test_reasoning_content_only_when_thinking(client: httpx.Client) -> None:
    off = client.post(CHAT, json=chat_body("Hi")).json()["choices"][0]["message"]
    assert off["reasoning_content"] is None
    on_body = chat_body(
        "Hi", chat_template_kwargs={"enable_thinking": True}, stream_options={"include_usage": True}
    )
    on = client.post(CHAT, json=on_body).json()
    msg = on["choices"][0]["message"]
    assert msg["reasoning_content"].startswith("Simulator") and msg["reasoning_content"].endswith("\n")
    # "REASONING\n</think>\n\nANSWER" through sglang's qwen3 reasoning parser
    assert msg["content"] == "\n\n" + off["content"]
    # the newline before </think> is reasoning, </think> itself is a token too
    assert on["usage"]["reasoning_tokens"] == count_tokens(msg["reasoning_content"].rstrip("\n")) + 1
    assert on["usage"]["completion_tokens_details"] == {"reasoning_tokens": on["usage"]["reasoning_tokens"]}
    events = sse_events(client, on_body)
    kinds = [
        "reasoning_content" if e["choices"][0]["delta"].get("reasoning_content") else "content"
        for e in events[1:-3]
    ]
    first_content = kinds.index("content")
    assert set(kinds[:first_content]) == {"reasoning_content"} and set(kinds[first_content:]) == {"content"}


def test_thinking_default_follows_the_reasoning_parser_unless_default_kwargs_say() -> None:
    plain = {k: v for k, v in FAST.items() if k != "default_chat_template_kwargs"}
    with serve_in_thread(SimSettings(**plain)) as handle:  # --reasoning-parser qwen3: enable_thinking mode
        msg = httpx.post(handle.url + CHAT, json=chat_body("Hi")).json()["choices"][0]["message"]
        assert msg["reasoning_content"]
        off = httpx.post(
            handle.url + CHAT, json=chat_body("Hi", chat_template_kwargs={"enable_thinking": False})
        )
        assert off.json()["choices"][0]["message"]["reasoning_content"] is None
    with serve_in_thread(
        SimSettings(**FAST)
    ) as handle:  # --default-chat-template-kwargs enable_thinking false
        msg = httpx.post(handle.url + CHAT, json=chat_body("Hi")).json()["choices"][0]["message"]
        assert msg["reasoning_content"] is None
        on = httpx.post(
            handle.url + CHAT, json=chat_body("Hi", chat_template_kwargs={"enable_thinking": True})
        )
        assert on.json()["choices"][0]["message"]["reasoning_content"]


def test_max_tokens_cuts_with_length(client: httpx.Client) -> None:
    for key in ("max_tokens", "max_completion_tokens"):
        body = client.post(CHAT, json=chat_body("Hello there", **{key: 3})).json()
        assert body["choices"][0]["finish_reason"] == "length"
        assert body["usage"]["completion_tokens"] == 3
        assert body["choices"][0]["message"]["content"] == "Simulator reply:"


@pytest.mark.parametrize("stream", [False, True])
def test_ignore_eos_gives_exactly_max_tokens(client: httpx.Client, stream: bool) -> None:
    body = chat_body("x", max_tokens=57, ignore_eos=True, stream_options={"include_usage": True})
    if stream:
        events = sse_events(client, body)
        content = [e for e in events[1:-3] if "content" in e["choices"][0]["delta"]]
        assert len(content) == 57
        assert events[-2]["usage"]["completion_tokens"] == 57
        assert events[-3]["choices"][0]["finish_reason"] == "length"
    else:
        out = client.post(CHAT, json=body).json()
        assert out["usage"]["completion_tokens"] == 57
        assert count_tokens(out["choices"][0]["message"]["content"]) == 57


def test_min_tokens_pads_to_at_least(client: httpx.Client) -> None:
    out = client.post(CHAT, json=chat_body("x", min_tokens=80, max_tokens=200)).json()
    assert out["usage"]["completion_tokens"] == 80
    assert out["choices"][0]["finish_reason"] == "stop"


def test_sampling_params_accepted_and_temperature_zero_is_deterministic(client: httpx.Client) -> None:
    body = chat_body("same please", temperature=0, top_p=0.9, seed=7, max_tokens=30, ignore_eos=True)
    a = client.post(CHAT, json=body).json()["choices"][0]["message"]["content"]
    b = client.post(CHAT, json=body).json()["choices"][0]["message"]["content"]
    assert a == b
    hot = {**body, "temperature": 0.8}
    c = client.post(CHAT, json=hot).json()["choices"][0]["message"]["content"]
    d = client.post(CHAT, json=hot).json()["choices"][0]["message"]["content"]
    assert c == d  # same seed, same filler
    assert count_tokens(c) == 30


# --- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload, needle",
    [
        (b"{not json", "Invalid JSON"),
        (b"[]", "JSON object"),
        (json.dumps({"model": "m"}).encode(), "messages"),
        (json.dumps({"messages": []}).encode(), "messages"),
        (json.dumps({"messages": [{"role": "wizard", "content": "x"}]}).encode(), "role"),
        (json.dumps(chat_body(max_tokens=-1)).encode(), "max_tokens must be positive"),
        (json.dumps(chat_body(temperature=-1)).encode(), "temperature"),
        (
            json.dumps(
                chat_body(
                    tool_choice={"type": "function", "function": {"name": "nope"}},
                    tools=[{"type": "function", "function": {"name": "a"}}],
                )
            ).encode(),
            "nope",
        ),
    ],
)
def test_bad_requests_are_400_in_sglang_shape(client: httpx.Client, payload: bytes, needle: str) -> None:
    resp = client.post(CHAT, content=payload, headers={"content-type": "application/json"})
    assert resp.status_code == 400
    body = resp.json()
    assert body["object"] == "error" and body["type"] == "BadRequestError"
    assert body["code"] == 400 and body["param"] is None
    assert needle in body["message"]


def test_prompt_longer_than_context_or_kv_pool_is_refused_fast() -> None:
    # Refused before any prefill: three refusals of longer prompts take less time than one
    # accepted prompt's prefill (relative: a loaded machine slows both alike).
    settings = SimSettings(**{**FAST, "prefill_tps": 2000.0}, context_length=2000, max_total_tokens=1000)
    with serve_in_thread(settings) as handle, httpx.Client(base_url=handle.url, timeout=10) as c:
        t0 = time.monotonic()
        assert (
            c.post(CHAT, json=chat_body("word " * 800, max_tokens=1)).status_code == 200
        )  # ~0.4 s of prefill
        accepted = time.monotonic() - t0
        t0 = time.monotonic()
        over_kv = c.post(CHAT, json=chat_body("word " * 1500))
        assert over_kv.status_code == 400
        kv_message = (
            "Input length (1504 tokens) exceeds the maximum allowed length (999 tokens). "
            "Use a shorter input or enable --allow-auto-truncate."
        )
        assert over_kv.json()["message"] == kv_message
        # streamed, the scheduler's abort arrives after the 200: an error event, then [DONE]
        streamed = c.post(CHAT, json=chat_body("word " * 1500, stream=True))
        assert streamed.status_code == 200
        assert streamed.text == (
            'data: {"error": {"object": "error", "message": "'
            + kv_message
            + '", "type": "BAD_REQUEST", "param": null, "code": 400}}\n\ndata: [DONE]\n\n'
        )
        over_ctx = c.post(CHAT, json=chat_body("word " * 2500))
        assert over_ctx.json()["message"] == (
            "The input (2504 tokens) is longer than the model's context length (2000 tokens)."
        )
        too_much = c.post(CHAT, json=chat_body("word " * 500, max_tokens=1800))
        assert too_much.status_code == 400 and "maximum context length" in too_much.json()["message"]
        assert time.monotonic() - t0 < accepted


# --- timing and capacity ------------------------------------------------------------------------


def test_decode_and_prefill_timing() -> None:
    settings = SimSettings(
        startup_seconds=0,
        decode_tps=100,
        prefill_tps=2000,
        log_requests=False,
        default_chat_template_kwargs='{"enable_thinking": false}',
        enable_metrics=True,
        enable_cache_report=True,
    )
    with serve_in_thread(settings) as handle, httpx.Client(base_url=handle.url, timeout=10) as c:
        # 996 prompt words + 4 overhead = 1000 tokens -> 0.5 s prefill; 31 tokens -> 0.3 s decode
        body = chat_body("w " * 996, max_tokens=31, ignore_eos=True)
        t0 = time.monotonic()
        first = None
        with c.stream("POST", CHAT, json={**body, "stream": True}) as resp:
            for line in resp.iter_lines():
                if first is None and '"content": "' in line and '"role"' not in line:
                    first = time.monotonic() - t0
        total = time.monotonic() - t0
        # Lower bounds are the sim's own sleeps; upper ones are relative (load stretches all alike):
        # decode (0.3 s) after prefill (0.5 s) is about 0.6 of it.
        assert first is not None and first >= 0.45, first
        assert total >= 0.75 and 0.3 <= (total - first) / first <= 1.5, (first, total)
        t0 = time.monotonic()
        c.post(CHAT, json={**body, "messages": [{"role": "user", "content": "v " * 996}]})
        plain = time.monotonic() - t0
        assert plain >= 0.75 and 0.6 <= plain / total <= 1.6, (
            plain,
            total,
        )  # non-streaming takes the same time


def _timed_requests(url: str, count: int, body: dict[str, Any]) -> list[float]:
    """Send ``count`` requests at once; seconds until each finished, sorted."""
    done: list[float] = []
    with httpx.Client(base_url=url, timeout=20) as c:
        c.get("/health")  # connect and warm up before the clock starts
        t0 = time.monotonic()

        def one() -> None:
            c.post(CHAT, json=body).raise_for_status()
            done.append(time.monotonic() - t0)

        threads = [threading.Thread(target=one) for _ in range(count)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return sorted(done)


def test_requests_beyond_max_running_queue_fifo() -> None:
    settings = SimSettings(
        startup_seconds=0,
        decode_tps=100,
        max_running_requests=2,
        log_requests=False,
        default_chat_template_kwargs='{"enable_thinking": false}',
        enable_metrics=True,
        enable_cache_report=True,
    )
    with serve_in_thread(settings) as handle:
        body = chat_body("queue", max_tokens=21, ignore_eos=True)  # 0.2 s each
        done = _timed_requests(handle.url, 4, body)
        # lower bounds only: the reference runtime keeps its own clock, and a loaded machine can
        # only delay what the client sees, never hasten it. With two slots the last two cannot
        # finish before two decodes (2 x 0.2 s); had all four run at once, each would end near 0.2 s.
        assert done[0] >= 0.19 and done[1] >= 0.19, done
        assert done[2] >= 0.38 and done[3] >= 0.38, done  # the others waited for a slot
        metrics = httpx.get(handle.url + "/metrics").text.replace(
            ',engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0"', ""
        )
        assert 'sglang:num_running_reqs{model_name="sim-model"} 0.0' in metrics


def test_kv_pool_admits_only_prompts_that_fit_together() -> None:
    settings = SimSettings(
        startup_seconds=0,
        decode_tps=100,
        max_total_tokens=1000,
        log_requests=False,
        default_chat_template_kwargs='{"enable_thinking": false}',
        enable_metrics=True,
        enable_cache_report=True,
    )
    with serve_in_thread(settings) as handle:
        # two 600-token prompts do not fit the 1000-token pool together: the second waits, so the
        # pair takes about 1.7 times one alone where two at once would take 1.0 (a ratio: a
        # starved client thread delays a single finish, the first one's, by as much as a decode)
        body = chat_body("w " * 596, max_tokens=21, ignore_eos=True)
        alone = min(_timed_requests(handle.url, 1, body)[0] for _ in range(2))
        done = _timed_requests(handle.url, 2, body)
        assert done[1] >= 1.35 * alone and done[1] >= 0.38, (alone, done)


def test_aggregate_tps_shares_decode_speed() -> None:
    settings = SimSettings(
        startup_seconds=0,
        decode_tps=1000,
        aggregate_tps=100,
        log_requests=False,
        default_chat_template_kwargs='{"enable_thinking": false}',
        enable_metrics=True,
        enable_cache_report=True,
    )
    with serve_in_thread(settings) as handle:
        # 2 requests x 20 tokens at 100 tok/s in total: about 0.4 s, not 0.02 s; about twice one
        # alone. Lower bounds only, as above: a loaded machine delays what the client sees and
        # never hastens it (an upper bound of 3x one alone read 3.6x on a loaded machine), and
        # the fastest of two lone requests is the one the load delayed least
        body = chat_body("share", max_tokens=20, ignore_eos=True)
        alone = min(_timed_requests(handle.url, 1, body)[0] for _ in range(2))
        done = _timed_requests(handle.url, 2, body)
        assert done[-1] >= 0.3 and done[-1] >= 1.4 * alone, (alone, done)


def test_prefix_cache_reports_cached_tokens(client: httpx.Client) -> None:
    shared = "A long shared system prompt about deployments. " * 60
    first = client.post(
        CHAT,
        json={
            "messages": [{"role": "system", "content": shared}, {"role": "user", "content": "question one"}]
        },
    ).json()
    second = client.post(
        CHAT,
        json={
            "messages": [{"role": "system", "content": shared}, {"role": "user", "content": "question two"}]
        },
    ).json()
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert 0.8 * count_tokens(shared) <= cached < second["usage"]["prompt_tokens"]
    unique = client.post(
        CHAT,
        json={
            "messages": [
                {"role": "system", "content": "nonce 8a7f. " + shared},
                {"role": "user", "content": "question two"},
            ]
        },
    ).json()
    assert unique["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert client.post("/flush_cache").status_code == 200
    again = client.post(
        CHAT,
        json={
            "messages": [{"role": "system", "content": shared}, {"role": "user", "content": "question one"}]
        },
    ).json()
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


# --- settings, CLI, process -----------------------------------------------------------------------


def test_settings_from_env_and_args() -> None:
    env = {
        "DEPLOYTOOL_SIM_DECODE_TPS": "55",
        "DEPLOYTOOL_SIM_VISION": "false",
        "DEPLOYTOOL_SIM_FAULT": "never_ready,drop_stream=4",
        "DEPLOYTOOL_SIM_SERVED_MODEL_NAME": "env-name",
    }
    s = SimSettings.from_env_and_args(
        [
            "--decode-tps",
            "77",
            "--fault",
            "http_500_every=3",
            "--thinking-default",
            "on",
            "--no-reasoning-field",
        ],
        env=env,
    )
    assert s.decode_tps == 77.0 and s.vision is False and s.served_model_name == "env-name"
    assert s.faults == ("never_ready", "drop_stream=4", "http_500_every=3")
    assert s.thinking_default is True and s.no_reasoning_field is True
    assert SimSettings.from_env_and_args([], env={}) == SimSettings()
    with pytest.raises(SystemExit):
        SimSettings.from_env_and_args(["--fault", "meteor_strike"], env={})
    with pytest.raises(ValueError):
        SimSettings(gsm8k_oracle=1.5)


def test_token_rule() -> None:
    assert count_tokens("Hello, world!") == 4
    assert count_tokens("") == 0
    text = "  The answer: 42 apples.\n\n Done!  "
    assert "".join(fragments(text)) == text  # fragments carry their whitespace: nothing is lost
    assert "".join(fragments("a b, c")) == "a b, c"
    assert len(fragments(text)) == count_tokens(text)


def test_module_runs_as_a_process_with_only_its_own_dependencies() -> None:
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "deploytool.sim",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--startup-seconds",
            "0.1",
            "--default-chat-template-kwargs",
            '{"enable_thinking": false}',
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        else:
            pytest.fail("the sim process never became healthy")
        out = httpx.post(f"http://127.0.0.1:{port}{CHAT}", json=chat_body("ping")).json()
        assert out["choices"][0]["message"]["content"].startswith("Simulator reply")
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert "SIMULATOR" in err and "NOT a model" in err
    assert "POST /v1/chat/completions 200 prompt=5" in err
    # the slim image has no deploytool dependencies besides starlette, uvicorn and pillow
    probe = (
        "import sys, deploytool.sim, deploytool.sim.__main__; "
        "bad = {'pydantic','typer','rich','docker','yaml','jinja2','httpx','pandas','numpy','matplotlib'}; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in bad))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def test_equal_looking_requests_release_their_own_slots() -> None:
    """Seen in a full GSM8K run: two requests with the same prompt size and token count compared
    equal, so one's release removed the other's slot and a finished slot stayed running forever
    (5 of 8 slots lost after 2,638 requests). Slots are compared by identity."""
    import asyncio

    from deploytool.sim.engine import Engine

    async def crossing() -> int:
        engine = Engine(SimSettings(max_running_requests=2))
        first, second = await engine.admit(100), await engine.admit(100)
        first.generated = second.generated = 12
        engine.release(second)  # second finishes while first has the same counts
        first.generated = 13
        engine.release(first)
        await asyncio.sleep(0)
        return len(engine.running)

    assert asyncio.run(crossing()) == 0
