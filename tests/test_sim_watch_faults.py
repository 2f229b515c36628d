"""The sim faults a supervisor must notice: /health failing while the process serves on
(health_fail_after), and a process that exits some seconds after start-up (exit_after)."""

from __future__ import annotations

import time

import httpx
from sim_settings import FAST

from deploytool.sim import SimSettings, serve_in_thread
from deploytool.sim.faults import parse_faults

HELLO = {"messages": [{"role": "user", "content": "Hello there."}], "max_tokens": 8}


def test_health_fail_after_fails_health_while_the_process_still_answers_chat():
    sim = serve_in_thread(SimSettings(**FAST, faults=("health_fail_after=1",)), wait_ready=True)
    try:
        assert httpx.get(sim.url + "/health", timeout=5).status_code == 200
        deadline = time.monotonic() + 10
        while httpx.get(sim.url + "/health", timeout=5).status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert httpx.get(sim.url + "/health", timeout=5).status_code == 503
        chat = httpx.post(sim.url + "/v1/chat/completions", json=HELLO, timeout=10)
        assert chat.status_code == 200 and chat.json()["choices"][0]["message"]["content"]
        assert sim.exit_code is None  # the process runs on: only a supervisor can tell
    finally:
        sim.stop()


def test_exit_after_ends_the_process_with_the_crash_status():
    sim = serve_in_thread(SimSettings(**FAST, faults=("exit_after=1",)), wait_ready=True)
    try:
        deadline = time.monotonic() + 10
        while sim.exit_code is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sim.exit_code == 3
    finally:
        sim.stop()


def test_the_new_faults_parse_and_take_a_number():
    config = parse_faults(["health_fail_after=30,exit_after=5"])
    assert (config.health_fail_after, config.exit_after) == (30, 5)
    assert config.active[:2] == ["health_fail_after=30", "exit_after=5"]
