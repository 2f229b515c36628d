"""deploytool.sim: injected faults, in-process and as a real process (exit statuses)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest
from conftest import free_port
from sim_settings import FAST

from deploytool.sim import SimSettings, serve_in_thread

CHAT = "/v1/chat/completions"
HELLO = {"messages": [{"role": "user", "content": "Hello there, please say something long enough."}]}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city", "days"],
            },
        },
    }
]


def sim_with(*faults: str, **settings: Any) -> Any:
    return serve_in_thread(SimSettings(**{**FAST, **settings}, faults=faults))


def _spawn(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
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
            "0",
            "--decode-tps",
            "20000",
            *args,
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **(env or {})},
    )
    return proc, f"http://127.0.0.1:{port}"


def _wait_healthy(url: str, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    pytest.fail("sim process did not become healthy")


def test_crash_on_start_exits_3_with_a_message() -> None:
    proc, _ = _spawn(env={"DEPLOYTOOL_SIM_FAULT": "crash_on_start"})
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 3
    assert "crash_on_start" in err and "status 3" in err
    with pytest.raises(RuntimeError, match="crash_on_start"):
        sim_with("crash_on_start")


def test_crash_after_n_chat_requests_kills_the_process() -> None:
    proc, url = _spawn("--fault", "crash_after=2")
    try:
        _wait_healthy(url, proc)
        for _ in range(2):
            assert httpx.post(url + CHAT, json=HELLO, timeout=10).status_code == 200
        assert proc.wait(timeout=10) == 3
        _, err = proc.communicate(timeout=5)
        assert "FAULT crash_after=2" in err
    finally:
        if proc.poll() is None:
            proc.kill()


def test_crash_after_in_thread_stops_the_server_not_the_tests() -> None:
    sim = sim_with("crash_after=1")
    try:
        assert httpx.post(sim.url + CHAT, json=HELLO).status_code == 200
        deadline = time.monotonic() + 5
        while sim.running and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sim.exit_code == 3 and not sim.running
        with pytest.raises(httpx.TransportError):
            httpx.get(sim.url + "/health", timeout=2)
    finally:
        sim.stop()


def test_never_ready_keeps_health_503() -> None:
    with sim_with("never_ready", startup_seconds=0.05) as sim:
        time.sleep(0.3)
        assert httpx.get(sim.url + "/health").status_code == 503
        assert httpx.get(sim.url + "/health_generate").status_code == 503
        assert httpx.get(sim.url + "/v1/models").status_code == 200
        with pytest.raises(TimeoutError):
            sim.wait_ready(timeout=0.3)


def test_http_500_every_nth_chat_request() -> None:
    with sim_with("http_500_every=2") as sim:
        codes = [httpx.post(sim.url + CHAT, json=HELLO).status_code for _ in range(4)]
        assert codes == [200, 500, 200, 500]
        body = httpx.post(sim.url + CHAT, json=HELLO)  # 5th: fine again
        assert body.status_code == 200
        err = httpx.post(sim.url + CHAT, json=HELLO).json()
        assert err["object"] == "error" and err["code"] == 500 and "http_500_every=2" in err["message"]


def test_drop_stream_cuts_the_connection_without_done() -> None:
    with sim_with("drop_stream=3") as sim:
        lines: list[str] = []
        with (
            pytest.raises(httpx.RemoteProtocolError),
            httpx.stream("POST", sim.url + CHAT, json={**HELLO, "stream": True}, timeout=10) as resp,
        ):
            assert resp.status_code == 200
            for line in resp.iter_lines():
                if line:
                    lines.append(line)
        assert len(lines) == 3 and all(line.startswith("data: {") for line in lines)
        # non-streaming requests are unaffected, and the server lives on
        assert httpx.post(sim.url + CHAT, json=HELLO).status_code == 200


def test_bad_tool_json_alternates_invalid_json_and_wrong_types() -> None:
    body = {"messages": [{"role": "user", "content": "Weather in Paris for 3 days"}], "tools": TOOLS}
    with sim_with("bad_tool_json") as sim:
        first = httpx.post(sim.url + CHAT, json=body).json()["choices"][0]["message"]["tool_calls"][0]
        second = httpx.post(sim.url + CHAT, json=body).json()["choices"][0]["message"]["tool_calls"][0]
    with pytest.raises(json.JSONDecodeError):
        json.loads(first["function"]["arguments"])
    wrong = json.loads(second["function"]["arguments"])
    assert set(wrong) == {"city", "days"}
    assert not isinstance(wrong["city"], str) and not isinstance(wrong["days"], int)


def test_no_reasoning_field_puts_think_block_in_content() -> None:
    with sim_with(no_reasoning_field=True) as sim:
        body = {**HELLO, "chat_template_kwargs": {"enable_thinking": True}}
        msg = httpx.post(sim.url + CHAT, json=body).json()["choices"][0]["message"]
        streamed = []
        with httpx.stream("POST", sim.url + CHAT, json={**body, "stream": True}) as resp:
            for line in resp.iter_lines():
                if line.startswith("data: {"):
                    streamed.append(json.loads(line[6:])["choices"][0]["delta"])
    assert msg["reasoning_content"] is None
    assert (
        msg["content"].startswith("<think>\nSimulator") and "</think>\n\nSimulator reply:" in msg["content"]
    )
    assert not any(d.get("reasoning_content") for d in streamed)
    assert "".join(d.get("content") or "" for d in streamed) == msg["content"]


def test_unknown_fault_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown fault"):
        SimSettings(faults=("solar_flare",))
    with pytest.raises(ValueError, match="positive integer"):
        SimSettings(faults=("drop_stream=0",))
    proc = subprocess.run(
        [sys.executable, "-m", "deploytool.sim", "--fault", "crash_after"],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert proc.returncode == 2 and "crash_after" in proc.stderr
