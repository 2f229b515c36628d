"""The bench and compare commands, and the benchmark as a qualify suite, against the sim."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from bench_helpers import BENCH_TINY_PROFILE, sim_in_process
from typer.testing import CliRunner

from deploytool.checks.targets import Target
from deploytool.cli.app import app
from deploytool.profiles import ProfileStore
from deploytool.qualify.runner import run_qualification

pytestmark = pytest.mark.timeout(180)


@pytest.fixture()
def profiles(tmp_path: Path) -> Path:
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "bench-tiny.yaml").write_text(BENCH_TINY_PROFILE)
    return folder


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


# the sim's speeds where a test times nothing (the commands' output and files are what it reads):
# its requests take little wall time
FAST = {"decode_tps": 4_000.0, "prefill_tps": 400_000.0}


def test_bench_and_compare_commands(tmp_path, profiles):
    handle = sim_in_process(**FAST)
    try:
        for name in ("a", "b"):
            result = _invoke(
                "bench",
                "--url",
                handle.url,
                "--profile",
                "bench-tiny",
                "--profiles-dir",
                str(profiles),
                "--quick",
                "--report",
                str(tmp_path / name),
            )
            assert result.exit_code == 0, result.output
            assert "decode, 1 request" in result.output
        as_json = _invoke(
            "bench",
            "--url",
            handle.url,
            "--profile",
            "bench-tiny",
            "--profiles-dir",
            str(profiles),
            "--quick",
            "--repeats",
            "1",  # the method it reports is what this run checks: one pass shows it
            "--json",
        )
    finally:
        handle.stop()
    data = json.loads(as_json.stdout)
    assert data["method"]["preset"] == "quick" and data["method"]["decode_requests"] == 2
    assert data["method"]["decode_output_tokens"] == 40  # the profile's bench.quick section applied
    compared = _invoke(
        "compare",
        str(tmp_path / "a"),
        str(tmp_path / "b" / "results.json"),
        "--report",
        str(tmp_path / "cmp"),
    )
    assert compared.exit_code == 0, compared.output
    assert "->" in compared.output and re.search(
        r"\(\d+\.\d\dx[ )]", compared.output
    )  # a ratio, with its interval
    assert "(sampled, not compared)" in compared.output  # the server's gauges: never a ratio
    # the top section's latency picture and the ratio chart (a table run has no sweep to overlay)
    assert (tmp_path / "cmp" / "comparison.html").read_text().count("data:image/png;base64,") == 2


def test_unknown_bench_setting_in_profile_is_a_clear_error(tmp_path, profiles):
    (profiles / "bench-tiny.yaml").write_text(
        BENCH_TINY_PROFILE.replace("decode_requests: 2", "decode_reqs: 2")
    )
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--url",
            "http://127.0.0.1:9",
            "--profile",
            "bench-tiny",
            "--profiles-dir",
            str(profiles),
            "--quick",
        ],
    )
    assert result.exit_code != 0
    assert "decode_reqs" in str(result.exception) and "unknown setting" in str(result.exception)


def test_performance_suite_gates_and_regression(tmp_path, profiles):
    profile = ProfileStore([profiles]).get("bench-tiny")
    handle = sim_in_process(decode_tps=400)
    try:
        first = run_qualification(Target(url=handle.url, profile=profile), report_dir=tmp_path / "q1")
    finally:
        handle.stop()
    suite = first.suite("performance")
    assert suite is not None and suite.passed, suite.reason if suite else first.summary_line()
    assert 0 < suite.figures["decode_c1_tps"] <= 400 * 1.05  # never faster than the sim's setting
    assert "No regression check" in suite.method  # no previous release yet

    # the next release decodes at half the speed: the regression gate against the stored run fails
    slower = Target(url="", profile=profile)
    handle = sim_in_process(decode_tps=200)
    try:
        slower.url = handle.url
        slower.previous_results = tmp_path / "q1" / "results.json"  # what the lead's Target will carry
        second = run_qualification(slower, report_dir=tmp_path / "q2")
    finally:
        handle.stop()
    suite = second.suite("performance")
    assert suite is not None and not suite.passed
    # half the speed: 50% worse, as the ratio of two runs' figures one after the other on one machine
    # (the load may change between them: +/-15 points; a gate that compared nothing would show 0)
    failed = [g for g in suite.gates if not g.passed]
    assert any(
        g.name == "regression: decode, 1 request" and g.measured == pytest.approx(50, abs=15) for g in failed
    )
    assert all(g.passed for g in suite.gates if g.name == "decode tok/s at concurrency 1")  # 200 >= 150 still


def test_performance_suite_skipped_unless_the_profile_asks(profiles):
    from deploytool.qualify.suites import performance

    (profiles / "no-perf.yaml").write_text(
        "name: no-perf\nextends: sim\nqualify: {performance: null, suites: null}\n"
    )
    store = ProfileStore([profiles])
    assert performance.applies_to(store.get("no-perf"), None) is not None
    assert performance.applies_to(store.get("bench-tiny"), None) is None
    assert performance.applies_to(None, None) is not None


def test_bench_and_qualify_keep_a_report_under_the_state_folder_and_reports_lists_them(
    profiles, deploytool_home, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # nothing may land in the folder a run is started from
    handle = sim_in_process(**FAST)
    try:
        bench = _invoke(
            "bench",
            "--url",
            handle.url,
            "--profile",
            "bench-tiny",
            "--profiles-dir",
            str(profiles),
            "--quick",
            "--repeats",
            "1",
        )
        assert bench.exit_code == 0, bench.output
        qualify = _invoke(
            "qualify",
            "--url",
            handle.url,
            "--profile",
            "bench-tiny",
            "--profiles-dir",
            str(profiles),
            "--suite",
            "preflight",
            "--no-progress",
        )
    finally:
        handle.stop()
    assert "report:" in bench.output and "report:" in qualify.output
    assert list(tmp_path.iterdir()) == [tmp_path / "profiles"]
    listed = json.loads(_invoke("reports", "--json").stdout)["reports"]
    assert sorted(r["kind"] for r in listed) == ["bench", "qualify"]
    for entry in listed:
        assert (
            Path(entry["path"]).is_relative_to(deploytool_home)
            and (Path(entry["path"]) / "results.json").is_file()
        )
    text = _invoke("reports").output
    assert "bench" in text and "qualify" in text
