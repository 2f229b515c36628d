"""`deploytool tune` on the reference runtime, whose speeds answer the launch flags by the rules
of docs/sim.md ("Launch flags and speed"), so the true optimum is known: at 8 concurrent users
and 100 tok/s per request, a running limit of 2 serves 200 tok/s, one of 8 with its CUDA graphs
following the plan's running limit 800 tok/s, and a memory fraction of 0.4 leaves the 57 GiB of
weights no KV pool on an H200 (the planner says so; the candidate is never started)."""

from __future__ import annotations

import json
import math
import os
import signal
import time
from pathlib import Path

import pytest
import yaml
from conftest import run_cli, start_cli
from tune_helpers import write_profile

from deploytool.tune.local import port_is_free


def tune_cli(profiles: Path, report: Path, *extra: str, timeout: float = 300):
    return run_cli(
        "tune",
        "--profile",
        "tune-sim",
        "--profiles-dir",
        str(profiles),
        "--report",
        str(report),
        "--json",
        *extra,
        timeout=timeout,
    )


def test_tune_finds_the_known_optimum_and_prunes_what_the_plan_forbids(tmp_path: Path, docker_engine) -> None:
    profiles = write_profile(
        tmp_path / "profiles",
        tune={
            "flags": {"max-running-requests": [2, 8], "mem-fraction-static": [0.4, 0.85]},
            "derived": ["cuda-graph-max-bs"],
        },
    )
    report = tmp_path / "report"
    done = tune_cli(profiles, report, "--local")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    by_id = {c["id"]: c for c in data["candidates"]}
    # the optimum: running limit 8, graphs up to the plan's running limit (8), the memory fraction kept
    assert data["winner"] == "c03"
    assert by_id["c03"]["changes"] == {"max-running-requests": 8}
    assert by_id["c03"]["derived"] == {"cuda-graph-max-bs": 8}
    assert data["ties"] == [] and by_id["base"]["verdict"] == "slower"
    ratio = by_id["c03"]["score_median"] / by_id["base"]["score_median"]
    assert 2.5 < ratio < 5.0  # the rules say 4: 8 x 100 against 2 x 100 tok/s
    # pruned by the plan with its reason, never started, no log
    for cid in ("c01", "c02"):
        assert by_id[cid]["verdict"] == "pruned by the plan"
        assert "no memory for the KV cache" in by_id[cid]["pruned"]
        assert by_id[cid]["starts"] == []
    # the winner started twice (the restart-to-restart noise), the profile's own launch once
    assert sorted(p.name for p in (report / "logs").iterdir()) == [
        "base-start1.log",
        "c03-start1.log",
        "c03-start2.log",
        "winner-qualify.log",
    ]
    assert data["counts"] == {**data["counts"], "planned": 4, "pruned": 2, "started": 3, "failed_starts": 0}
    assert (
        data["beyond_spread"]
        and 2.5 < data["ratio_to_base"][1] <= data["ratio_to_base"][0] <= data["ratio_to_base"][2]
    )
    # the server's own pool, by the memory rule, beside the plan's
    kv = math.floor((141 * 0.85 - 57) * (1 << 30) / 98304)
    assert by_id["c03"]["reported"] == {
        "kv_tokens": kv,
        "running_limit": 8,
        "runtime_version": by_id["c03"]["reported"]["runtime_version"],
    }
    assert by_id["c03"]["reported"]["runtime_version"]  # the reference runtime's /server_info version
    assert data["runtime_note"] is None  # not an SGLang recipe: no release's rules to compare
    assert by_id["c03"]["plan"]["running_limit"] == 8
    # nothing left listening
    for cand in data["candidates"]:
        for start in cand["starts"]:
            assert port_is_free(int(start["url"].rsplit(":", 1)[1]))
    # the report, the picture, and the winner as a profile that extends the original
    assert data["recommended"] and data["qualify"]["passed"]
    assert (report / "frontier.png").stat().st_size > 1000
    assert "| c03 | max-running-requests=8, cuda-graph-max-bs=8 |" in (report / "report.md").read_text()
    written = Path(data["winner_profile"])
    text = written.read_text()
    assert "# evidence: " + str(report / "results.json") in text
    body = yaml.safe_load(text)
    assert body["extends"] == "tune-sim"
    assert body["server"] == {"args": {"max-running-requests": 8, "cuda-graph-max-bs": 8}}
    # `up --dry-run` accepts the written profile
    from conftest import free_port

    up = run_cli(
        "up",
        "--cpu",
        "--profile",
        body["name"],
        "--profiles-dir",
        str(profiles),
        "--profiles-dir",
        str(written.parent),
        "--port",
        str(free_port()),
        "--dry-run",
        "--json",
        "--suite",
        "preflight",
    )
    assert up.returncode == 0, up.stdout + up.stderr
    assert "memory plan" in up.stdout


def test_candidates_that_do_not_differ_are_a_tie_and_nothing_is_recommended(tmp_path: Path) -> None:
    # chunked-prefill-size is reported only by the reference runtime: the same speed, a tie. The
    # margin is as wide, against the timing noise, as 5% was for levels four times as long: a
    # stall of a busy machine (tens of ms, in one pass) is that much more of a short level
    profiles = write_profile(
        tmp_path / "profiles",
        tune={"flags": {"chunked-prefill-size": [4096, 8192, 16384]}, "load": [4], "tie_margin": 0.2},
    )
    done = tune_cli(profiles, tmp_path / "report", "--local")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    verdicts = {c["id"]: c["verdict"] for c in data["candidates"]}
    # the profile sets no chunked-prefill-size: all three values differ from its own launch
    assert sorted(verdicts.values()) == ["tie", "tie", "tie", "winner"]
    assert data["winner_profile"] is None and not data["recommended"]
    # the winner got its second start, and every tie says why in numbers
    assert all(len(c["starts"]) >= 1 for c in data["candidates"])
    assert len({c["id"]: c for c in data["candidates"]}[data["winner"]]["starts"]) == 2
    assert all("the winner x" in c["why"] for c in data["candidates"] if c["verdict"] == "tie")


def test_a_candidate_that_cannot_start_is_found_at_once_and_the_search_goes_on(tmp_path: Path) -> None:
    # a start that dies of what no plan sees (the runtime's crash-on-start fault): found as it
    # happens, and the search goes on (a memory death is pruned before the start: below)
    profiles = write_profile(
        tmp_path / "profiles", tune={"flags": {"fault": ["crash_on_start"]}, "rounds": 1, "repeats": 1}
    )
    done = tune_cli(profiles, tmp_path / "report", "--local", "--no-qualify")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    failed = {c["id"]: c for c in data["candidates"]}["c01"]
    assert failed["verdict"] == "failed to start"
    assert "crash_on_start" in Path(failed["starts"][0]["log"]).read_text()
    # the exit is seen as it happens, not the health budget waited out
    assert failed["starts"][0]["error"].startswith("the server exited with status 3 before it was ready")
    assert data["winner"] == "base" and data["counts"]["failed_starts"] == 1


def test_candidates_above_the_upper_edge_are_pruned_as_one_lesson_and_none_dies_of_memory(
    tmp_path: Path,
) -> None:
    # the reference runtime's memory rule (edge_rule.py, as the planner's): 141 GiB x (1 - 0.97) =
    # 4.2 GiB beside the pool, under the 6 GiB workspace: both 0.97 candidates would die of CUDA
    # out-of-memory; the plan drops them before any start, for one reason
    profiles = write_profile(
        tmp_path / "profiles",
        args={"activation-gib": 6},
        tune={
            "flags": {"mem-fraction-static": [0.85, 0.97], "max-running-requests": [2, 4]},
            "rounds": 1,
            "repeats": 1,
        },
    )
    done = tune_cli(profiles, tmp_path / "report", "--local", "--no-qualify")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    died = [c for c in data["candidates"] if c["verdict"] == "failed to start"]
    assert died == [] and data["counts"]["failed_starts"] == 0
    pruned = [c for c in data["candidates"] if c["verdict"] == "pruned by the plan"]
    assert len(pruned) == 2 and all(c["changes"]["mem-fraction-static"] == 0.97 for c in pruned)
    assert all("the highest fraction that starts is 0.957" in c["pruned"] for c in pruned)
    assert {c["lesson"] for c in pruned} == {"upper edge: mem-fraction-static above 0.957"}


def test_an_slo_no_candidate_meets_names_the_closest(tmp_path: Path) -> None:
    profiles = write_profile(
        tmp_path / "profiles", tune={"flags": {"max-running-requests": [2, 4]}, "rounds": 1, "repeats": 1}
    )
    done = tune_cli(profiles, tmp_path / "report", "--local", "--slo", "min_user_tps=500")
    assert done.returncode == 1
    data = json.loads(done.stdout)
    assert data["winner"] is None and len(data["closest"]) == 2
    assert {c["verdict"] for c in data["candidates"]} == {"no point inside the SLO"}


def test_budget_stops_cleanly_and_resume_goes_on_from_the_journal(tmp_path: Path) -> None:
    profiles = write_profile(
        tmp_path / "profiles", tune={"flags": {"max-running-requests": [2, 8]}, "rounds": 1, "repeats": 1}
    )
    report = tmp_path / "report"
    first = tune_cli(profiles, report, "--local", "--budget", "1s", "--no-qualify")
    assert first.returncode == 7, first.stderr  # nothing measured: inconclusive
    assert json.loads(first.stdout)["stopped_by_budget"] and json.loads(first.stdout)["inconclusive"]
    again = tune_cli(profiles, report, "--local", "--no-qualify")
    assert again.returncode == 2 and "--resume" in json.loads(again.stdout)["error"]["hint"]
    resumed = tune_cli(profiles, report, "--local", "--resume", "--no-qualify")
    data = json.loads(resumed.stdout)
    assert data["winner"] == "c01" and not data["stopped_by_budget"]
    # a winner whose qualify was skipped is a result (exit 0) but not a recommendation
    assert resumed.returncode == 0 and data["winner_profile"] and data["qualify"]["ran"] is False
    assert data["recommended"] is False
    lines = [json.loads(x) for x in (report / "journal.jsonl").read_text().splitlines()]
    assert [x["candidate"] for x in lines if x["kind"] == "start"] == ["base", "c01"]


def test_dry_run_shows_space_pruned_and_estimate_and_starts_nothing(tmp_path: Path) -> None:
    profiles = write_profile(
        tmp_path / "profiles",
        tune={"flags": {"max-running-requests": [2, 8], "mem-fraction-static": [0.4, 0.85]}},
    )
    done = run_cli(
        "tune",
        "--profile",
        "tune-sim",
        "--profiles-dir",
        str(profiles),
        "--report",
        str(tmp_path / "r"),
        "--dry-run",
    )
    assert done.returncode == 0, done.stderr
    assert "space: max-running-requests [2, 8]; mem-fraction-static [0.4, 0.85]" in done.stdout
    assert "c01 (mem-fraction-static=0.4): the weights" in done.stdout
    assert "estimate: about" in done.stdout
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("tune", "words"),
    [
        ({"flags": {"max-runing-requests": [2, 8]}}, "max-runing-requests"),
        ({"flags": {"max-running-requests": []}}, "non-empty list"),
        ({"flags": {}}, "the space is empty"),
        ({"flags": {"decode-tps": [50]}, "speed": 1}, "unknown key"),
    ],
)
def test_bad_spaces_are_refused_before_anything_starts(tmp_path: Path, tune: dict, words: str) -> None:
    profiles = write_profile(tmp_path / "profiles", tune=tune)
    done = run_cli(
        "tune",
        "--profile",
        "tune-sim",
        "--profiles-dir",
        str(profiles),
        "--local",
        "--json",
        "--report",
        str(tmp_path / "r"),
    )
    assert done.returncode == 2, done.stdout
    assert words in json.dumps(json.loads(done.stdout)["error"])
    assert not (tmp_path / "r" / "logs").exists()


@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"]
)
def test_ctrl_c_or_sigterm_stops_the_candidate_and_frees_its_port(
    tmp_path: Path, sig: int, code: int
) -> None:
    # SIGTERM is a batch scheduler's time limit or `timeout`: on the H200 a killed tune left its
    # candidate's server holding 74 GB until this was handled like Ctrl-C
    profiles = write_profile(
        tmp_path / "profiles",
        tune={"flags": {"max-running-requests": [2, 8]}, "output_tokens": 400},
        startup=0.2,
    )
    proc = start_cli(
        "tune",
        "--profile",
        "tune-sim",
        "--profiles-dir",
        str(profiles),
        "--local",
        "--report",
        str(tmp_path / "r"),
    )
    url = None
    deadline = time.monotonic() + 120
    assert proc.stderr is not None
    while url is None and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if "starting on http://" in line:
            url = line.split("starting on ", 1)[1].split()[0]
    assert url, "tune never started a candidate"
    port = int(url.rsplit(":", 1)[1])
    time.sleep(2.0)  # inside the measurement
    os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert port_is_free(port)
    assert not [p for p in Path("/proc").iterdir() if p.name.isdigit() and _serves(p, port)]


def _serves(proc_dir: Path, port: int) -> bool:
    try:
        argv = (proc_dir / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"deploytool.sim" in argv and str(port).encode() in argv


def test_on_a_card_s_slot_the_search_plans_for_that_card_and_never_starts_on_a_described_host(
    tmp_path: Path,
) -> None:
    # a card's Docker slot is where `up --gpu` serves; on a described host (no such cards here)
    # the plan is made for the described card and a real search is refused before any work
    hosts = Path(__file__).resolve().parent / "data" / "nvml-hosts"
    env = {
        "DEPLOYTOOL_NVML_STANDIN": str(hosts / "h200x2-pcie-switch.yaml"),
        "DOCKER_HOST": "unix:///nonexistent/docker.sock",
    }
    uuid = json.loads(run_cli("gpus", "--json", env=env).stdout)["gpus"][0]["uuid"]
    profiles = write_profile(tmp_path / "profiles", tune={"flags": {"max-running-requests": [2, 8]}})
    args = ["tune", "--profile", "tune-sim", "--profiles-dir", str(profiles), "--gpu", uuid, "--json"]
    dry = run_cli(*args, "--report", str(tmp_path / "dry"), "--dry-run", env=env)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    data = json.loads(dry.stdout)
    assert data["where"] == f"--gpu {uuid}" and "H200" in json.dumps(data["card"])
    real = run_cli(*args, "--report", str(tmp_path / "real"), env=env)
    assert real.returncode == 2, real.stdout + real.stderr
    assert "the host is described by" in json.loads(real.stdout)["error"]["message"]
    assert not (tmp_path / "real").exists()
    bad = run_cli(
        "tune", "--profile", "tune-sim", "--profiles-dir", str(profiles), "--gpu", "GPU-1", "--json", env=env
    )
    assert bad.returncode == 2 and "is not a GPU UUID" in json.loads(bad.stdout)["error"]["message"]


@pytest.mark.parametrize(
    ("workload", "settings", "group"),
    [
        (
            "agentic",
            {
                "first_prompt_tokens": 256,
                "turn_user_tokens": 16,
                "output_tokens_per_turn": 16,
                "turns": 2,
                "concurrency": [4],
            },
            "agentic_c4",
        ),
        (
            "open-loop",
            {
                "rates": [16.0],
                "requests_per_rate": 12,
                "prompt_tokens": 64,
                "output_tokens": 24,
                "slo_ttft_s": 30.0,
                "slo_itl_p99_s": 5.0,
            },
            "poisson_r16",
        ),
    ],
)
def test_bench_workloads_load_each_candidate_and_the_running_limit_still_wins(
    tmp_path: Path, workload: str, settings: dict, group: str
) -> None:
    # by the reference runtime's rules four conversations (or 16 arrivals a second) are served
    # at the running limit's width, with graphs up to it: the limit 4 beats the profile's 2 (its
    # own graphs), which beats 1
    profiles = write_profile(
        tmp_path / "profiles",
        tune={
            "flags": {"max-running-requests": [1, 4]},
            "derived": ["cuda-graph-max-bs"],
            "workload_settings": settings,
            "rounds": 1,
        },
    )
    done = tune_cli(profiles, tmp_path / "r", "--local", "--workload", workload, "--no-qualify")
    assert done.returncode in (0, 1), done.stdout + done.stderr
    data = json.loads(done.stdout)
    by_id = {c["id"]: c for c in data["candidates"]}
    assert data["space"]["workload"] == workload and data["winner"] == "c02", data
    assert by_id["c02"]["changes"] == {"max-running-requests": 4}
    assert by_id["c02"]["derived"] == {"cuda-graph-max-bs": 4}
    assert by_id["base"]["score_median"] < by_id["c02"]["score_median"]
    # one running request: predicted at most half the profile's own launch, never started
    assert by_id["c01"]["verdict"] == "not started (cannot win)" and by_id["c01"]["starts"] == []
    journal = [json.loads(line) for line in (tmp_path / "r" / "journal.jsonl").read_text().splitlines()]
    passes = [e for e in journal if e["kind"] == "pass"]
    assert passes and all(len(p["points"]) == 1 for p in passes)  # the workload's one level, nothing else


def test_a_workload_tune_cannot_search_or_settings_it_refuses_are_usage_errors(tmp_path: Path) -> None:
    profiles = write_profile(
        tmp_path / "profiles",
        tune={"flags": {"max-running-requests": [1, 4]}, "workload_settings": {"turnz": 3}},
    )
    bad = tune_cli(profiles, tmp_path / "r", "--local", "--workload", "agentic")
    assert bad.returncode == 2 and "turnz: unknown setting" in json.loads(bad.stdout)["error"]["message"]
    other = tune_cli(profiles, tmp_path / "r", "--local", "--workload", "input-ablation")
    assert (
        other.returncode == 2 and "not one tune searches with" in json.loads(other.stdout)["error"]["message"]
    )
    assert not (tmp_path / "r").exists()
