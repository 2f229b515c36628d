"""The tools suite probes what BFCL and SGLang's own function-call tests probe, and each sim
fault that breaks one of those behaviours fails the right category, naming why."""

from __future__ import annotations

from pathlib import Path

from qualify_helpers import qualify, sim

from deploytool.qualify import Verdict
from deploytool.qualify.suites.tools import CATEGORIES, load_cases

CASES = 14


def test_the_clean_sim_passes_every_category_four_ways(tmp_path: Path) -> None:
    with sim() as handle:
        report = qualify(handle.url, tmp_path, suites=["tools"], limit=None)
    tools = report.suite("tools")
    assert tools.verdict is Verdict.PASSED, tools.reason
    assert set(tools.figures["by_category"]) == set(CATEGORIES)
    assert tools.figures["passed"] == tools.figures["runs"] == CASES * 2 * 2


def test_the_long_argument_is_over_2kb_and_quoted_whole() -> None:
    _, cases = load_cases()
    case = next(c for c in cases if c["id"] == "long-argument")
    content = case["expect"][0]["arguments"]["content"]
    assert len(content) >= 2048 and f'"{content}"' in case["prompt"] and '"' not in content


def test_a_server_that_ignores_tool_choice_fails_the_tool_choice_gate(tmp_path: Path) -> None:
    with sim(faults=("ignore_tool_choice",)) as handle:
        report = qualify(handle.url, tmp_path, suites=["tools"], limit=None)
    tools = report.suite("tools")
    assert tools.verdict is Verdict.FAILED and report.exit_code == 1
    gate = next(g for g in tools.gates if g.name == "tool_choice calls correct")
    assert gate.measured == "0/12" and not gate.passed
    problems = {r["case"]: r["problem"] for r in tools.figures["rows"] if not r["passed"]}
    assert (
        "finish_reason is 'stop', expected 'tool_calls'" in problems["choice-required"]
    )  # answered in prose
    assert "called get_weather although no call may be made" in problems["choice-none"]
    assert "no call to 'convert_currency'" in problems["choice-named"]
    assert all(g.passed for g in tools.gates if g.name != "tool_choice calls correct"), tools.reason


def test_a_server_that_drops_a_long_arguments_tail_fails_the_long_argument_gate(tmp_path: Path) -> None:
    with sim(faults=("drop_arg_tail=1024",)) as handle:
        report = qualify(handle.url, tmp_path, suites=["tools"], limit=None)
    tools = report.suite("tools")
    assert tools.verdict is Verdict.FAILED
    failed = [g for g in tools.gates if not g.passed]
    assert [g.name for g in failed] == ["long-argument calls correct"], tools.reason
    assert "only the first 1024 characters arrived (its tail of" in failed[0].detail


def test_parser_markup_in_content_is_named(tmp_path: Path) -> None:
    with sim(tools=False) as handle:
        report = qualify(handle.url, tmp_path, suites=["tools"], limit=3)
    problems = [p for t in report.suite("tools").transcripts for p in t["problems"]]
    assert any(
        p.startswith("parser markup ['<tool_call>', '</tool_call>'] leaked into content") for p in problems
    )
