"""`qualify --limit N` below the needle grid's number of lengths runs the cells it kept (no
length left without samples to judge), and a suite that ran and crashed is a failure (exit 1),
not "could not run" (exit 6), which is kept for runs where nothing could be measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from qualify_helpers import qualify, sim

from deploytool.checks.targets import Target
from deploytool.cli import main
from deploytool.qualify import Verdict, run_qualification
from deploytool.qualify.suites import registry
from deploytool.qualify.suites.needle import Settings, grid_lengths


@pytest.fixture(scope="module")
def healthy():
    with sim() as handle:
        yield handle


@pytest.mark.parametrize("limit", [1, 2, 3])
def test_needle_with_a_limit_below_its_lengths_judges_the_lengths_it_reached(
    healthy, tmp_path: Path, limit: int
) -> None:
    # the shipped needle settings (8K, 32K, 128K and the 225K target): the first `limit` cells
    # each sit at one of the first `limit` lengths
    report = run_qualification(
        Target(url=healthy.url, profile=None),
        suites=["needle"],
        limit=limit,
        report_dir=tmp_path,
        overrides={"preflight": {"ready_timeout_s": 2}},
    )
    needle = report.suite("needle")
    assert needle.verdict is Verdict.PASSED, needle.reason
    assert report.exit_code == 0 and needle.limited
    grid, _, _ = grid_lengths(Settings(), healthy.settings.context_length)
    judged = [row["length"] for row in needle.figures["by_length"]]
    assert judged == grid[:limit] and needle.figures["requests"] == limit
    assert [g.name for g in needle.gates] == [f"string_match_all at {n} tokens" for n in grid[:limit]]
    assert f"--limit {limit}: {limit} cells, at lengths {grid[:limit]}" in needle.method


def test_qualify_cli_limit_1_runs_every_suite_without_a_crash(healthy, tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "qualify",
                "--url",
                healthy.url,
                "--limit",
                "1",
                "--no-progress",
                "--json",
                "--set",
                "preflight.ready_timeout_s=2",
                "--report",
                str(tmp_path),
            ]
        )
    doc = json.loads(capsys.readouterr().out)
    crashed = [(s["name"], s["reason"]) for s in doc["suites"] if "crashed" in (s["reason"] or "")]
    assert (
        crashed == []
        and doc["suites"][[s["name"] for s in doc["suites"]].index("needle")]["verdict"] == "passed"
    )
    assert exit_info.value.code == doc["exit_code"] != 6, doc["summary"]


def test_a_crashed_suite_fails_the_run_instead_of_could_not_run(healthy, tmp_path: Path, monkeypatch) -> None:
    tools = registry()["tools"]

    async def crashes(ctx):
        raise KeyError(225000)

    monkeypatch.setattr(tools, "run", crashes)
    report = qualify(healthy.url, tmp_path, suites=["preflight", "tools"])
    assert report.suite("preflight").verdict is Verdict.PASSED
    assert (
        report.suite("tools").verdict is Verdict.ERROR
        and "suite crashed: KeyError: 225000" in report.suite("tools").reason
    )
    assert report.could_not_run is None and not report.passed
    assert report.exit_code == 1 and report.verdict == "failed", report.summary_line()


def test_up_with_limit_3_qualifies_and_cuts_over(slot_env) -> None:
    done = slot_env("up", "--cpu", "--profile", "t-good", "--limit", "3", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["release"] == 1 and result["qualify"]["passed"], result["qualify"]
    assert "--limit 3" in result["qualify"]["summary"]
