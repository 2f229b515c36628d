"""A rollout of two slots under streaming load through a real nginx, with the hooks of
docs/hooks.md (pre-stop marks the slot `down` and reloads; post-cutover puts it back; neither
sleeps): deploytool waits, after each pre-stop, until the server itself reports no running and
no queued request, so answers longer than any fixed sleep a hook could make are not cut."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
from conftest import free_port, run_cli, run_clis
from lifecycle_helpers import health_check, remove_instance

pytestmark = pytest.mark.index  # the sim image's wheels are downloaded once (then cached)

NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if Path(p).exists()), None)
# each answer streams for 3 s from t-old (6 s from t-new, 300 tok/s, where the drain timeout of
# 1 s must still find it running): longer than the old hooks' sleeps, and than the drain's poll
# and the hooks' reload by far
TOKENS, LONG_TOKENS, DECODE_TPS = 600, 1_800, 200

PROFILE = """\
name: {name}
extends: sim
server:
  args:
    startup-seconds: 0.5
    decode-tps: {tps}
health: {health}
qualify: {{suites: [preflight]}}
rollout: {{qualify: [preflight], quick_performance: false}}
"""

NGINX_CONF = """\
daemon off;
pid {root}/nginx.pid;
error_log {root}/error.log;
worker_processes 1;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {root}/tmp/body;
    proxy_temp_path {root}/tmp/proxy;
    fastcgi_temp_path {root}/tmp/fastcgi;
    uwsgi_temp_path {root}/tmp/uwsgi;
    scgi_temp_path {root}/tmp/scgi;
    upstream llm {{
        include {root}/upstreams/*.conf;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://llm;
            proxy_http_version 1.1;
            proxy_buffering off;
            proxy_read_timeout 3600s;
        }}
    }}
}}
"""

# docs/hooks.md's nginx hooks, on this test's own nginx (its prefix and configuration)
# (the pre-stop waits until nginx's old workers stopped accepting: `-s reload` only signals the
# master, and on a loaded machine a request they took after the drain's count was cut by the stop)
PRE_STOP = """#!/bin/sh
set -eu
echo "server ${{DEPLOYTOOL_URL#http://}} down;" > {root}/upstreams/$DEPLOYTOOL_SLOT.conf
workers=$(pgrep -P "$(cat {root}/nginx.pid)" || true)
{nginx} -p {root} -c {root}/nginx.conf -t -q && {nginx} -p {root} -c {root}/nginx.conf -s reload
for pid in $workers; do
    while tr '\\0' ' ' < /proc/$pid/cmdline 2>/dev/null | grep -q 'worker process *$'; do sleep 0.05; done
done
"""
POST_CUTOVER = """#!/bin/sh
set -eu
echo "server ${{DEPLOYTOOL_URL#http://}} max_fails=3 fail_timeout=10s;" > {root}/upstreams/$DEPLOYTOOL_SLOT.conf
{nginx} -p {root} -c {root}/nginx.conf -t -q && {nginx} -p {root} -c {root}/nginx.conf -s reload
"""


class Load:
    """Clients streaming long answers (`tokens` each) through the gateway, one after another,
    until stopped."""

    def __init__(self, url: str, clients: int, tokens: int = TOKENS):
        self.url, self.tokens, self.done, self.cut, self._stop = url, tokens, 0, [], threading.Event()
        self.threads = [threading.Thread(target=self._client, daemon=True) for _ in range(clients)]

    def _one(self, client: httpx.Client) -> None:
        body = {
            "model": "sim-model",
            "messages": [{"role": "user", "content": "tell a long story"}],
            "max_tokens": self.tokens,
            "ignore_eos": True,
            "stream": True,
        }
        seen_done = False
        try:
            with client.stream("POST", self.url + "/v1/chat/completions", json=body, timeout=60) as response:
                if response.status_code != 200:
                    self.cut.append(f"HTTP {response.status_code}")
                    return
                for line in response.iter_lines():
                    seen_done = seen_done or line.strip() == "data: [DONE]"
        except httpx.HTTPError as exc:
            self.cut.append(f"{type(exc).__name__}: {exc}")
            return
        if seen_done:
            self.done += 1
        else:
            self.cut.append("stream ended without [DONE]")

    def _client(self) -> None:
        # each request on its own connection: a reload closes nginx's idle keep-alive connections,
        # and a request sent on one as it closes never reached a server (the keep-alive race a
        # client retries); what this test counts is answers the stop cut, not that race
        with httpx.Client(limits=httpx.Limits(max_keepalive_connections=0)) as client:
            while not self._stop.is_set():
                self._one(client)

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self.threads:
            t.join(self.tokens / DECODE_TPS + 30)


@pytest.fixture
def gateway(docker_engine, tmp_path: Path):
    """cpu-a and cpu-b serving t-old behind this test's nginx; its hooks folder."""
    if NGINX is None:
        pytest.skip("no nginx on this host (apt-get install nginx-light): the gateway of docs/hooks.md")
    folder, root = tmp_path / "profiles", tmp_path / "nginx"
    folder.mkdir()
    for name, tps in (("t-old", DECODE_TPS), ("t-new", DECODE_TPS + 100)):
        (folder / f"{name}.yaml").write_text(PROFILE.format(name=name, tps=tps, health=health_check()))
    for sub in ("upstreams", "tmp", "hooks"):
        (root / sub).mkdir(parents=True)
    ports = {"a": free_port(), "b": free_port()}
    for out in run_clis(
        *(
            (
                "up",
                "--cpu-slot",
                name,
                "--profile",
                "t-old",
                "--port",
                str(port),
                "--skip-qualify",
                "--profiles-dir",
                str(folder),
            )
            for name, port in ports.items()
        )
    ):
        assert out.returncode == 0, out.stderr
    for name, port in ports.items():
        (root / "upstreams" / f"cpu-{name}.conf").write_text(
            f"server 127.0.0.1:{port} max_fails=3 fail_timeout=10s;\n"
        )
    port = free_port()
    (root / "nginx.conf").write_text(NGINX_CONF.format(root=root, port=port))
    for hook, text in (
        ("pre-stop", PRE_STOP),
        ("post-cutover", POST_CUTOVER),
        ("post-rollback", POST_CUTOVER),
    ):
        (root / "hooks" / hook).write_text(text.format(root=root, nginx=NGINX))
        (root / "hooks" / hook).chmod(0o755)
    nginx = subprocess.Popen(
        [NGINX, "-p", str(root), "-c", str(root / "nginx.conf")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert nginx.poll() is None and time.monotonic() < deadline, (
            nginx.stderr.read() if nginx.stderr else ""
        )
        time.sleep(0.2)
    try:
        yield folder, root / "hooks", url, ports
    finally:
        nginx.terminate()
        nginx.wait(10)
        remove_instance(docker_engine)


def test_a_rollout_under_load_through_nginx_cuts_no_request_and_a_drain_timeout_is_reported(gateway):
    """Both on one gateway and its two slots (one setup of them, not two): the rollout, then a
    stop of one of the slots it upgraded."""
    rollout_under_streaming_load_through_nginx_cuts_no_request(gateway)
    request_still_running_at_the_drain_timeout_is_reported(gateway)


def rollout_under_streaming_load_through_nginx_cuts_no_request(gateway) -> None:
    folder, hooks, url, _ = gateway
    started = time.monotonic()
    with Load(url, clients=4) as load:
        time.sleep(1)  # every client is mid-answer when the rollout begins
        out = run_cli(
            "rollout",
            "--cpu-slot",
            "a",
            "--cpu-slot",
            "b",
            "--profile",
            "t-new",
            "--profiles-dir",
            str(folder),
            "--canary-qualify",
            "quick",
            "--hooks",
            str(hooks),
            "--json",
            timeout=600,
        )
        assert out.returncode == 0, out.stdout + out.stderr
    seconds = round(time.monotonic() - started, 1)
    journal = [
        json.loads(x)
        for x in (Path(os.environ["DEPLOYTOOL_HOME"]) / "journal.jsonl").read_text().splitlines()
    ]
    drains = [e for e in journal if e["event"] == "release.drained"]
    print(
        f"\nrollout of two slots through nginx under 4 streaming clients ({TOKENS} tokens at {DECODE_TPS} tok/s, "
        f"{TOKENS / DECODE_TPS:g} s each): {load.done} answers completed, {len(load.cut)} cut, {seconds} s; drains: "
        + "; ".join(
            f"{e['slot']} r{e['release']}: waited for {e['at_start']} for {e['waited_s']} s" for e in drains
        )
    )
    # each slot's stop waited for what its server still ran, by the server's count, and none was left
    assert sorted(e["slot"] for e in drains) == ["cpu-a", "cpu-b"]
    assert all(e["drained"] and e["left"] == 0 for e in drains), drains
    assert any(e["at_start"] > 0 for e in drains), "the load was on the slots while they were drained"
    # longer than a fixed sleep, and still no answer was cut
    assert max(e["waited_s"] for e in drains) > 0
    assert load.cut == [], load.cut
    assert load.done >= 4


def request_still_running_at_the_drain_timeout_is_reported(gateway) -> None:
    """The drain is bounded: what still runs at --drain-timeout is said, then cut by the stop
    (of cpu-a's release 2, t-new, which the rollout above cut over to)."""
    _, hooks, url, ports = gateway
    with Load(url, clients=4, tokens=LONG_TOKENS) as load:
        deadline = time.monotonic() + 30
        while _running(ports["a"]) < 1:  # slot a has answers in flight
            assert time.monotonic() < deadline
            time.sleep(0.1)
        out = run_cli("stop", "--cpu-slot", "a", "--drain-timeout", "1", "--hooks", str(hooks), "--json")
        assert out.returncode == 0, out.stdout + out.stderr
    drain = json.loads(out.stdout)["drains"][0]
    print(f"\nstop with --drain-timeout 1 under load: {drain}; {len(load.cut)} cut, {load.done} completed")
    assert drain["at_start"] >= 1 and drain["left"] >= 1 and not drain["drained"]
    assert "still running or queued at the drain timeout of 1 s" in out.stderr
    # the stop never cuts more than it reported left (the other slot's answers all completed);
    # whether those it reported are cut depends on whether they end within the container's stop
    # grace, which the server's SIGTERM handling and the machine's load decide
    assert len(load.cut) <= drain["left"], load.cut


def _running(port: int) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("sglang:num_running_reqs")
    )
