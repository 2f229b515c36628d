"""`deploytool top`: the reference runtime under load on loopback, read by the real command
(`--once --json`), its cards from a described host; and its view refreshing in a real terminal."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from conftest import run_cli
from monitor_helpers import Load
from sim_process import SimProcess

from deploytool.host.gpu_live import read_cards
from deploytool.host.nvml_standin import StandInNvml

HOSTS = Path(__file__).parent / "data" / "nvml-hosts"
PROFILE = """\
name: top-sim
extends: sim
qualify:
  preflight:
    min_running_requests: 2
    expect: {min_accept_length: 3.0}
"""


@pytest.fixture
def profiles(tmp_path: Path) -> Path:
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "top-sim.yaml").write_text(PROFILE)
    return folder


def test_top_once_json_under_load(profiles: Path) -> None:
    with (
        SimProcess(
            decode_tps=200,
            prefill_tps=20000,
            max_running_requests=2,
            enable_metrics=True,
            spec_accept_length=2.0,
            default_chat_template_kwargs='{"enable_thinking": false}',
        ) as sim,
        Load(sim.url, clients=4) as load,
    ):
        time.sleep(1.0)  # the clients have started and the queue has formed
        result = run_cli(
            "top",
            "--url",
            sim.url,
            "--profile",
            "top-sim",
            "--profiles-dir",
            str(profiles),
            "--once",
            "--interval",
            "2",
            "--json",
            env={
                "DEPLOYTOOL_NVML_STANDIN": str(
                    Path(__file__).parent / "data" / "top" / "h200-live-throttled.yaml"
                )
            },
            timeout=120,
        )
        assert load.done > 0
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    (server,) = report["servers"]
    f = server["figures"]
    assert f["why"] is None and server["name"] == sim.url and server["health"] == "healthy"
    assert f["requests_per_s"] > 0 and f["output_tps"] > 0 and f["input_tps"] > 0
    # 4 clients on a 2-request server: 2 run, the rest wait
    assert f["running"] == 2 and f["queued"] >= 1
    # 40 tokens at 200 tok/s per request (the speed is the sim's flag): TPOT near 5 ms
    assert 0.002 <= f["tpot_p50_s"] <= f["tpot_p99_s"] <= 0.02
    assert 0 < f["ttft_p50_s"] <= f["ttft_p99_s"]
    assert f["spec_accept_length"] == pytest.approx(2.0, rel=0.05)
    # the profile expects 3.0 tokens per verify step: outside, and said so
    assert server["gates"]["spec_accept_length"] == {
        "bound": 3.0,
        "kind": "min",
        "source": "qualify.preflight.expect.min_accept_length",
    }
    assert "spec_accept_length" in server["outside"] and "kv_use" not in server["outside"]
    cards = report["cards"]["cards"]
    assert [c["throttle"] for c in cards] == [[], ["sw_thermal_slowdown", "hw_thermal_slowdown"]]
    assert (
        cards[0]["power_w"] == 612.5 and cards[1]["temperature_c"] == 89 and cards[0]["utilization_pct"] == 97
    )


def test_top_survives_a_restart_and_a_cut_over() -> None:
    """The slot's release stops (the round says why, no figure from a dead server), then release 2
    serves on another port: the next rounds read it, its rates from its own counters only."""
    import asyncio

    from deploytool.monitor.top import Target, Top

    serving: list[Target] = []
    top = Top(
        lambda: list(serving), read_gpus=lambda: read_cards(StandInNvml.from_file(HOSTS / "h200-lent.yaml"))
    )

    async def rounds(n: int, pause: float = 0.5, load: Load | None = None):
        out = []
        for _ in range(n):
            out.append((await top.round()).rows[0])
            done = load.done if load else 0
            await asyncio.sleep(pause)
            # a rate needs requests that finished between two rounds: on a loaded machine half a
            # second can hold none (seen: 0 requests/s while two clients streamed), so the next
            # round waits for three more of the load's to finish (one may have ended before this
            # round's scrape and been counted by the client after it)
            waited = 0.0
            while load and load.done < done + 3 and waited < 10:
                await asyncio.sleep(0.05)
                waited += 0.05
        return out

    async def scenario():
        try:
            with (
                SimProcess(
                    enable_metrics=True,
                    decode_tps=300,
                    default_chat_template_kwargs='{"enable_thinking": false}',
                ) as first,
                Load(first.url, 2) as load,
            ):
                serving[:] = [Target("cpu", first.url, release=1, profile="sim")]
                before = await rounds(2, load=load)
            gone = await rounds(1)
            with (
                SimProcess(
                    enable_metrics=True,
                    decode_tps=300,
                    default_chat_template_kwargs='{"enable_thinking": false}',
                ) as second,
                Load(second.url, 2) as load,
            ):
                serving[:] = [Target("cpu", second.url, release=2, profile="sim")]
                after = await rounds(3, load=load)
            return before, gone, after
        finally:
            await top.aclose()

    before, gone, after = asyncio.run(scenario())
    assert before[1].figures.why is None and before[1].figures.get("requests_per_s") > 0
    assert "unreadable" in gone[0].figures.why and gone[0].figures.get("running") is None
    assert after[0].target.release == 2 and after[0].figures.get("running") is not None  # gauges at once
    assert after[0].figures.get("requests_per_s") is None  # no window across two servers
    assert after[-1].figures.why is None and after[-1].figures.get("output_tps") > 0
    assert len(after[-1].history["output_tps"]) == 3  # release 2's own history


def test_cards_without_live_readings_are_none_not_errors() -> None:
    """The lent H200's captured host has no live readings: each is None, memory still read."""
    now = read_cards(StandInNvml.from_file(HOSTS / "h200-lent.yaml"))
    (card,) = now.cards
    assert card.utilization_pct is None and card.power_w is None and card.temperature_c is None
    assert card.memory_total_mib == 143771 and card.throttle == []


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt-get install tmux)")
def test_top_refreshes_in_a_real_terminal(tmp_path: Path) -> None:
    """The live view in tmux: after a few rounds the pane shows the figures and the sparkline
    has grown, drawn in place (one header, not one per round); Ctrl-C leaves it, exit 0."""
    import sys

    with (
        SimProcess(
            decode_tps=200,
            max_running_requests=2,
            enable_metrics=True,
            default_chat_template_kwargs='{"enable_thinking": false}',
        ) as sim,
        Load(sim.url, clients=3),
    ):
        session = f"top-{tmp_path.name}"[:40]
        subprocess.run(
            [
                "tmux",
                "new-session",
                "-d",
                "-s",
                session,
                "-x",
                "140",
                "-y",
                "50",
                f"{sys.executable} -m deploytool top --url {sim.url} --interval 0.5; echo EXIT=$?; sleep 30",
            ],
            check=True,
        )
        try:
            deadline = time.monotonic() + 60
            pane = ""
            while time.monotonic() < deadline:
                time.sleep(1)
                pane = subprocess.run(
                    ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
                ).stdout
                if "requests/s" in pane and sum(pane.count(c) for c in "▁▂▃▄▅▆▇█") >= 12:
                    break
            subprocess.run(["tmux", "send-keys", "-t", session, "C-c"], check=True)  # how one leaves it
            for _ in range(20):
                time.sleep(0.5)
                after = subprocess.run(
                    ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
                ).stdout
                if "EXIT=" in after:
                    break
            (tmp_path / "pane.txt").write_text(pane + "\n----\n" + after)
        finally:
            subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    assert "TTFT p99" in pane and "output tok/s" in pane
    assert pane.count("output tok/s") == 1  # refreshed in place
    assert sum(pane.count(c) for c in "▁▂▃▄▅▆▇█") >= 12
    assert "EXIT=0" in after  # Ctrl-C leaves the live view without an error


def test_gates_come_from_the_profile(tmp_path: Path) -> None:
    from deploytool.monitor.top import gates_of
    from deploytool.profiles import ProfileStore

    (tmp_path / "watched.yaml").write_text(PROFILE + "monitor: {ttft_p99_s: 1.5}\n")
    gates = {g.key: (g.kind, g.bound, g.source) for g in gates_of(ProfileStore([tmp_path]).get("top-sim"))}
    assert gates == {
        "kv_use": ("max", 0.95, "deploytool: KV pool near full"),
        "spec_accept_length": ("min", 3.0, "qualify.preflight.expect.min_accept_length"),
        "ttft_p99_s": ("max", 1.5, "monitor.ttft_p99_s"),
    }
    assert [g.key for g in gates_of(ProfileStore().get("sim"))] == ["kv_use"]
