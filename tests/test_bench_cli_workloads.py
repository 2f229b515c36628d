"""`bench --workload NAME --repeats N` and `compare --interleave URL_A URL_B` from the command line."""

from __future__ import annotations

import json

import pytest
from sim_process import SimProcess
from typer.testing import CliRunner

from deploytool.cli.app import app

pytestmark = pytest.mark.timeout(180)


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def test_bench_runs_a_named_workload_and_records_its_settings(tmp_path):
    # nothing here is timed: the sim runs fast, so the agentic turns take little wall time
    with SimProcess(decode_tps=2_000, prefill_tps=400_000, max_running_requests=4) as sim:
        result = _invoke(
            "bench", "--url", sim.url, "--quick", "--workload", "agentic", "--repeats", "1", "--json"
        )
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout[result.stdout.index("{") :])
    assert run["workload"] == "agentic" and run["method"]["repeats"] == 1
    assert run["method"]["workload_settings"]["agentic"]["turns"] == 4  # the quick size, recorded
    assert any("reduced sizes" in n for n in run["notes"])
    assert {p["curve"] for p in run["sweep"]} == {"agentic"}
    # the sim's defaults are SGLang's: no /metrics, no cache report. The run still completes and
    # says what it could not measure, rather than guessing
    assert any(n.startswith("not measured: idle-server wait") for n in run["notes"])
    assert run["cache_check"]["source"] == "none" and not run["cache_check"]["ok"]
    assert all(g["idle_wait"]["idle"] is None and not g["contaminated"] for g in run["groups"])


def test_unknown_workload_is_refused_with_the_known_ones():
    from deploytool.errors import UsageError

    result = CliRunner().invoke(app, ["bench", "--url", "http://127.0.0.1:9", "--workload", "nope"])
    assert isinstance(result.exception, UsageError) and "nope" in str(result.exception)
    assert "agentic" in result.exception.hint and "open-loop" in result.exception.hint


def test_compare_interleave_measures_two_endpoints_alternately(tmp_path):
    # B at half A's every speed; the quick method's 128-token decode takes 0.16 s on A, 0.32 s on B
    with (
        SimProcess(decode_tps=800, aggregate_tps=1_600, prefill_tps=80_000, max_running_requests=4) as fast,
        SimProcess(decode_tps=400, aggregate_tps=800, prefill_tps=40_000, max_running_requests=4) as slow,
    ):
        result = _invoke(
            "compare",
            "--interleave",
            fast.url,
            slow.url,
            "--quick",
            "--repeats",
            "2",
            "--report",
            str(tmp_path / "ab"),
        )
    assert result.exit_code == 0, result.output
    assert "decode, 1 request" in result.output and "0.50x [" in result.output
    a = json.loads((tmp_path / "ab" / "A" / "results.json").read_text())
    b = json.loads((tmp_path / "ab" / "B" / "results.json").read_text())
    assert any("interleaved" in n for n in a["notes"])
    assert {g["repeat"] for g in a["groups"]} == {g["repeat"] for g in b["groups"]} == {0, 1}
    assert (tmp_path / "ab" / "comparison.html").is_file()
    assert (
        "Pareto" not in (tmp_path / "ab" / "comparison.html").read_text()
    )  # the table workload has no sweep
