"""bench and compare take frozen requests built once: a library caller gets what the commands
get (the measured run, its report kept; the comparison, its report written by the library),
and a value the library cannot use is refused where the request is built, naming its field
(the CLI says the flag, in the words it always used)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from bench_helpers import BENCH_TINY_PROFILE, sim_in_thread
from conftest import run_cli

from deploytool.bench.commands import bench, compare
from deploytool.bench.request import BenchRequest, CompareRuns, CompareSlots
from deploytool.checks.targets import TargetRequest
from deploytool.errors import FieldError, UsageError
from deploytool.host.slots import Slot

pytestmark = pytest.mark.timeout(180)


def test_a_library_caller_benches_by_request_and_compares_with_the_reports_written(tmp_path: Path):
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "bench-tiny.yaml").write_text(BENCH_TINY_PROFILE)
    said: list[str] = []
    handle = sim_in_thread()
    try:
        for name in ("a", "b"):
            request = BenchRequest(
                target=TargetRequest(
                    url=handle.url, profile_name="bench-tiny", profiles_dirs=(tmp_path / "profiles",)
                ),
                quick=True,
                repeats=1,
                report_dir=tmp_path / name,
            )
            outcome = bench(request, say=said.append, progress=False)
            assert outcome.exit_code == 0 and outcome.run is not None, outcome.why
            assert outcome.report_dir == tmp_path / name and (tmp_path / name / "report.html").is_file()
    finally:
        handle.stop()
    assert said[0].startswith(f"bench {handle.url}: table workload, quick method ") and "1 passes" in said[0]
    assert outcome.run.method["decode_output_tokens"] == 40  # the profile's bench.quick, under the request
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.repeats = 3  # type: ignore[misc]  # the point: a request is not changed after it is built

    comparison = compare(
        CompareRuns((tmp_path / "a", tmp_path / "b" / "results.json"), report_dir=tmp_path / "c")
    )
    assert [h.source for h in comparison.runs] and comparison.rows
    written = json.loads((tmp_path / "c" / "comparison.json").read_text())
    assert len(written["runs"]) == 2 and (tmp_path / "c" / "comparison.html").is_file()


def test_a_request_for_no_such_workload_names_its_field_and_the_cli_its_flag():
    with pytest.raises(FieldError) as refused:
        BenchRequest(target=TargetRequest(url="http://127.0.0.1:9"), workload="nope")
    assert refused.value.field == "workload" and str(refused.value).startswith(
        "workload 'nope': no such workload"
    )
    assert "agentic" in (refused.value.hint or "")
    out = run_cli("bench", "--url", "http://127.0.0.1:9", "--workload", "nope", "--json")
    error = json.loads(out.stdout)["error"]
    assert out.returncode == 2 and error["message"] == "--workload 'nope': no such workload"


def test_two_slots_to_compare_are_two_different_ones():
    with pytest.raises(UsageError, match="compare takes two different slots, got 2: cpu-a, cpu-a"):
        CompareSlots((Slot(cpu_name="a"), Slot(cpu_name="a")))
    out = run_cli("compare", "--cpu-slot", "a", "--json")
    assert out.returncode == 2
    assert json.loads(out.stdout)["error"]["message"] == "compare takes two different slots, got 1: cpu-a"


def test_repeats_below_one_is_refused_by_the_option_before_anything_runs():
    for args in (
        ["bench", "--url", "http://127.0.0.1:9"],
        ["compare", "--interleave", "http://a", "http://b"],
    ):
        out = run_cli(*args, "--repeats", "0", "--json")
        error = json.loads(out.stdout)["error"]
        assert out.returncode == 2 and error["kind"] == "UsageError" and "--repeats" in error["message"]
