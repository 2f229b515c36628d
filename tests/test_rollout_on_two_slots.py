"""`deploytool rollout` on the real engine with two CPU slots of the reference runtime on two
ports (cpu-a, cpu-b), the way two cards serve behind a gateway: one slot out of service at a
time (both ports sampled while it runs), a canary that fails leaves both on the old release, a
second-slot failure with --undo-on-failure returns both, a failing pre-stop hook aborts before
anything is stopped, every hook run is journaled, and an interrupted rollout resumes."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from conftest import ROOT, free_port, run_cli, run_clis, start_cli
from lifecycle_helpers import health_check, remove_instance, served_decode_tps, throwaways_left

pytestmark = pytest.mark.index  # the sim image's wheels are downloaded once (then cached)

BASE = """\
name: {name}
extends: sim
server:
  args:
    startup-seconds: 0.5
    decode-tps: {tps}
  env: {env}
health: {health}
qualify: {{suites: [preflight, contract{more}]}}
rollout: {{qualify: [preflight], quick_performance: true}}
"""


def profile(name: str, tps: int, env: str = "{}", more: str = "") -> str:
    return BASE.format(name=name, tps=tps, env=env, more=more, health=health_check())


@pytest.fixture
def two_slots(docker_engine, tmp_path: Path):
    """cpu-a and cpu-b serving t-old (release 1) on two free ports; removes them afterwards."""
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "t-old.yaml").write_text(profile("t-old", 2000))
    (folder / "t-new.yaml").write_text(profile("t-new", 3000))
    (folder / "t-badtools.yaml").write_text(
        profile("t-badtools", 3000, "{DEPLOYTOOL_SIM_FAULT: bad_tool_json}", ", tools")
    )
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
    yield folder, ports
    remove_instance(docker_engine)


def rollout(folder: Path, *args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return run_cli(
        "rollout", "--cpu-slot", "a", "--cpu-slot", "b", "--profiles-dir", str(folder), *args, timeout=timeout
    )


def serving() -> dict[str, tuple[int | None, str]]:
    """slot -> (the release that runs, its state), as status reports it (the slot's pointer,
    status's `current`, can differ after a crash: that is what some tests here look at)."""
    out = run_cli("status", "--json")
    slots = {s["slot"]: s for s in json.loads(out.stdout)["slots"]}
    return {
        name: (s["serving"], next((r["state"] for r in s["releases"] if r["release"] == s["serving"]), "-"))
        for name, s in slots.items()
    }


def events(name: str, **match) -> list[dict]:
    lines = (Path(os.environ["DEPLOYTOOL_HOME"]) / "journal.jsonl").read_text().splitlines()
    found = [json.loads(line) for line in lines]
    return [e for e in found if e["event"] == name and all(e.get(k) == v for k, v in match.items())]


class Sampler:
    """Probes both slots' /health every 50 ms while a rollout runs, each probe on a connection of
    its own (no keep-alive: a probe is a new client's request, as a gateway's health check is)."""

    def __init__(self, ports: dict[str, int]):
        self.ports, self.samples, self._stop = ports, [], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _up(self, client: httpx.Client, port: int) -> bool:
        try:
            return client.get(f"http://127.0.0.1:{port}/health").status_code == 200
        except httpx.HTTPError:
            return False

    def _run(self) -> None:
        # One client for every probe: a client per probe (httpx.get) parsed the CA bundle each
        # time, about 45 ms of CPU a probe, so the sampler took most of a core from the rollout
        # it watched. The probes are the same requests, each on a fresh connection.
        with httpx.Client(timeout=1, limits=httpx.Limits(max_keepalive_connections=0)) as client:
            while not self._stop.is_set():
                self.samples.append(
                    (time.monotonic(), {n: self._up(client, p) for n, p in self.ports.items()})
                )
                time.sleep(0.05)

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.thread.join(5)


def test_a_rollout_upgrades_both_slots_with_one_always_answering(two_slots):
    folder, ports = two_slots
    journal = Path(os.environ["DEPLOYTOOL_HOME"]) / "journal.jsonl"
    before = (journal.read_text(), serving())
    dry = rollout(folder, "--profile", "t-new", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)["plan"]
    assert plan["waves"] == [["cpu-a"], ["cpu-b"]] and [p["release"] for p in plan["slots"]] == [2, 2]
    assert (journal.read_text(), serving()) == before  # the dry run changed nothing
    with Sampler(ports) as sampler:
        out = rollout(folder, "--profile", "t-new", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert [(s["slot"], s["release"], s["previous"], s["state"]) for s in result["slots"]] == [
        ("cpu-a", 2, 1, "upgraded"),
        ("cpu-b", 2, 1, "upgraded"),
    ]
    assert served_decode_tps(ports["a"]) == 3000 and served_decode_tps(ports["b"]) == 3000
    down = {n: sum(1 for _, up in sampler.samples if not up[n]) for n in ports}
    neither = [t for t, up in sampler.samples if not any(up.values())]
    times = [t for t, _ in sampler.samples]
    print(
        f"\nrollout sampling: {len(times)} samples of both ports over {times[-1] - times[0]:.1f} s "
        f"(largest gap {max(b - a for a, b in itertools.pairwise(times)) * 1000:.0f} ms); down samples: {down}; "
        f"samples with neither answering: {len(neither)}"
    )
    assert not neither  # at every moment at least one slot answered
    assert (
        down["a"] > 0 and down["b"] > 0
    )  # each slot was out of service at some point, and the sampler saw it
    # the canary ran the profile's whole set, the second slot the rollout set
    quals = {e["slot"]: e for e in events("qualify")}
    canary_report = json.loads((Path(quals["cpu-a"]["report_dir"]) / "results.json").read_text())
    second_report = json.loads((Path(quals["cpu-b"]["report_dir"]) / "results.json").read_text())
    assert [s["name"] for s in canary_report["suites"]] == ["preflight", "contract"]
    assert [s["name"] for s in second_report["suites"]] == ["preflight"]
    rid = result["id"]
    assert [e["slot"] for e in events("rollout.slot.done", rollout=rid)] == ["cpu-a", "cpu-b"]
    assert events("rollout.done", rollout=rid)


def test_a_failing_canary_then_a_failing_pre_stop_each_leave_both_slots_on_the_old_release(
    two_slots, tmp_path
):
    """Two failed rollouts on the same two slots (one setup of them, not two): a canary that
    fails qualification, then a pre-stop hook that fails on the second slot. Each leaves both
    slots serving release 1, as it found them."""
    canary_failing_qualification_leaves_both_slots_on_the_old_release(two_slots)
    failing_pre_stop_on_the_second_slot_aborts_before_any_stop_and_undo_returns_both(two_slots, tmp_path)


def canary_failing_qualification_leaves_both_slots_on_the_old_release(two_slots) -> None:
    folder, _ = two_slots
    out = rollout(folder, "--profile", "t-badtools")
    assert out.returncode == 1
    assert "failed qualification" in out.stderr and "slot cpu-b: release 1 untouched" in out.stderr
    assert "slot cpu-a: release 1 (was" not in out.stderr and "slot cpu-a: release 1 restored" in out.stderr
    now = serving()
    assert now["cpu-a"] == (1, "running") and now["cpu-b"] == (1, "running")
    assert not events("rollout.slot.start", slot="cpu-b")  # never reached


def failing_pre_stop_on_the_second_slot_aborts_before_any_stop_and_undo_returns_both(
    two_slots, tmp_path: Path
) -> None:
    """After the failed canary above (cpu-a served its release 1 again; no hook was given)."""
    folder, ports = two_slots
    hooks, ran = tmp_path / "hooks", tmp_path / "ran"
    hooks.mkdir()
    for name in ("pre-stop", "post-cutover", "post-rollback", "on-failure"):
        body = f'echo "{name} $DEPLOYTOOL_SLOT $DEPLOYTOOL_RELEASE $DEPLOYTOOL_ROLLOUT" >> {ran}\n'
        if name == "pre-stop":  # the gateway refuses to drain cpu-b
            body += '[ "$DEPLOYTOOL_SLOT" = cpu-b ] && exit 9\n'
        (hooks / name).write_text("#!/bin/sh\n" + body + "exit 0\n")
        (hooks / name).chmod(0o755)
    out = rollout(folder, "--profile", "t-new", "--undo-on-failure", "--hooks", str(hooks))
    assert out.returncode == 1, out.stderr
    assert "pre-stop hook" in out.stderr and "exited with status 9" in out.stderr
    assert "slot cpu-a: release 1 rolled-back" in out.stderr
    now = serving()
    assert now["cpu-a"] == (1, "running") and now["cpu-b"] == (1, "running")
    assert served_decode_tps(ports["a"]) == 2000 and served_decode_tps(ports["b"]) == 2000
    assert not events("release.stopped", slot="cpu-b")  # the abort came before any stop on cpu-b
    assert events("rollout.slot.undone", slot="cpu-a")
    # every hook run is in the journal, with its exit code, in the order it ran
    runs = [line.split()[:2] for line in ran.read_text().splitlines()]
    journaled = [[e["hook"], e["slot"]] for e in events("hook")]
    assert journaled == runs
    assert runs == [
        ["pre-stop", "cpu-a"],
        ["post-cutover", "cpu-a"],
        ["pre-stop", "cpu-b"],
        ["on-failure", "cpu-b"],
        ["pre-stop", "cpu-a"],
        ["post-rollback", "cpu-a"],
    ]
    assert [e["exit_code"] for e in events("hook", hook="pre-stop", slot="cpu-b")] == [9]
    assert all(e["seconds"] >= 0 for e in events("hook"))


def test_an_interrupted_rollout_resumes_from_the_journal(two_slots, docker_engine):
    folder, ports = two_slots
    # t-new answering 503 for its first 5 s: the Ctrl-C below is sent within a poll (0.1 s) of
    # cpu-b's stop, and lands while the rollout reads cpu-b's cache volume, starts its new
    # release or waits for it; 5 s more than that is far more than a loaded machine takes to
    # deliver the signal, so it never lands after cpu-b finished qualifying. (Each slot's start
    # waits it out: the canary's, and cpu-b's again on --resume.)
    (folder / "t-new-slow.yaml").write_text(
        "name: t-new-slow\nextends: t-new\nserver:\n  args:\n"
        "    startup-seconds: 5\nhealth: " + health_check(600) + "\n"
    )
    proc = start_cli(
        "rollout",
        "--cpu-slot",
        "a",
        "--cpu-slot",
        "b",
        "--profile",
        "t-new-slow",
        "--profiles-dir",
        str(folder),
    )
    deadline = time.monotonic() + 300
    # cpu-b's hand-over began: its release 1 stopped, its release 2 starting (5 s before it is ready)
    while not events("release.stopped", slot="cpu-b") and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "--resume" in err
    # the Ctrl-C lands about when cpu-b's cache volume is read: no container of that read is left holding it
    assert throwaways_left(docker_engine) == []
    now = serving()
    assert now["cpu-a"] == (2, "running") and now["cpu-b"] == (1, "running")  # cpu-b restored
    rid = events("rollout.start")[-1]["rollout"]
    assert events("rollout.interrupted", rollout=rid)

    out = run_cli("rollout", "--resume", "--json", timeout=400)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["id"] == rid
    assert [(s["slot"], s["state"]) for s in result["slots"]] == [
        ("cpu-a", "upgraded"),
        ("cpu-b", "upgraded"),
    ]
    assert [e["slot"] for e in events("rollout.slot.start", rollout=rid)] == ["cpu-a", "cpu-b", "cpu-b"]
    assert served_decode_tps(ports["b"]) == 3000 and serving()["cpu-a"] == (2, "running")

    undo = run_cli("rollout", "--undo", "--json", timeout=300)
    assert undo.returncode == 0, undo.stderr
    assert served_decode_tps(ports["a"]) == 2000 and served_decode_tps(ports["b"]) == 2000


def test_a_rollout_cut_short_by_a_crash_of_deploytool_resumes(two_slots):
    """SIGKILL while cpu-b's new release starts: no restore ran, so cpu-b may serve a release
    that was never cut over. --resume brings cpu-b's current release back, then upgrades it."""
    folder, ports = two_slots
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "deploytool",
            "rollout",
            "--cpu-slot",
            "a",
            "--cpu-slot",
            "b",
            "--profile",
            "t-new",
            "--profiles-dir",
            str(folder),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 300
    while not events("release.started", slot="cpu-b", release=2) and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.kill()
    proc.wait(30)
    from deploytool.release.state import read_pointers

    assert read_pointers("cpu-a").current == 2 and read_pointers("cpu-b").current == 1  # b never cut over
    assert serving()["cpu-b"] == (2, "running")  # but its new release runs, unqualified
    cpu_b = {s["slot"]: s for s in json.loads(run_cli("status", "--json").stdout)["slots"]}["cpu-b"]
    assert (cpu_b["current"], cpu_b["serving"]) == (1, 2) and "release 2 is what runs" in cpu_b[
        "disagreement"
    ]
    out = run_cli("rollout", "--resume", "--json", timeout=400)
    assert out.returncode == 0, out.stderr
    settle = events("rollout.settle", slot="cpu-b")
    assert settle and settle[0]["release"] == 1 and settle[0]["stopped"] == 2
    assert [(s["slot"], s["release"], s["state"]) for s in json.loads(out.stdout)["slots"]] == [
        ("cpu-a", 2, "upgraded"),
        ("cpu-b", 3, "upgraded"),
    ]
    assert served_decode_tps(ports["b"]) == 3000
