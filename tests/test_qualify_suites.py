"""Each suite against the reference runtime on loopback (real HTTP, no mocks): passing for the
right reason on a healthy sim, failing with the cause named for each of its faults, and never
hanging past its budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from qualify_helpers import LIMIT, OURS, qualify, sim, sim_profile

from deploytool.checks.targets import Target
from deploytool.errors import ProfileError, UsageError
from deploytool.qualify import Verdict, run_qualification
from deploytool.qualify.suites import gsm8k as gsm8k_suite
from deploytool.qualify.suites import registry
from deploytool.sim.oracle import FORMATS, Gsm8kOracle

ORACLE_ACCURACY = 0.9


@pytest.fixture(scope="module")
def healthy():
    handle = sim(gsm8k_oracle=ORACLE_ACCURACY, max_running_requests=16)
    yield handle
    handle.stop()


def test_healthy_sim_passes_every_suite_for_the_right_reason(healthy, tmp_path: Path) -> None:
    profile = sim_profile(healthy.settings.port)
    report = qualify(healthy.url, tmp_path, profile=profile)
    verdicts = {s.name: s.verdict for s in report.suites}
    assert verdicts == dict.fromkeys(OURS, Verdict.PASSED), report.summary_line()
    assert report.passed and report.exit_code == 0

    pre = report.suite("preflight").figures
    assert (
        pre["health_status"] == 200
        and pre["max_total_num_tokens"] == 300_000
        and pre["max_running_requests"] == 16
    )

    contract = report.suite("contract").figures
    assert contract["measured"] == {
        "served_model_name": "sim-model",
        "port": healthy.settings.port,
        "context_length": 262144,
        "thinking_default": "off",
        "reasoning_field": "reasoning_content",
        "model": None,
    }
    assert contract["compared_with"] == "profile 'sim'" and contract["weights_changed"] is None

    vision = report.suite("vision")
    assert vision.figures["correct"] == vision.figures["cases"] == 6
    assert vision.figures["invalid_image_status"] == 400
    # The sim cannot read text: those cases are skipped cases with the reason, not passed ones.
    assert vision.figures["cases_skipped"] == 3
    assert {r["reason"] for r in vision.figures["skipped_cases"]} == {
        "the reference runtime cannot read text; docs/sim.md"
    }

    tools = report.suite("tools").figures
    assert tools["passed"] == tools["runs"] == 14 * 2 * 2  # every case, streamed and not, thinking on and off
    assert set(tools["by_category"]) == {
        "simple",
        "multiple",
        "parallel",
        "irrelevance",
        "round-trip",
        "tool_choice",
        "nested",
        "long-argument",
        "multi-turn",
    }

    needle = report.suite("needle").figures
    assert [row["length"] for row in needle["lengths"]] == [8192, 20_000]
    assert all(
        row["found"] and row["length"] - 200 <= row["prompt_tokens"] <= row["length"]
        for row in needle["lengths"]
    )
    assert [row["accuracy"] for row in needle["by_length"]] == [1.0, 1.0]
    assert report.suite("needle").limited  # --limit 20 keeps 20 of the 2 x 3 x 5 cells, spread over the grid
    assert needle["requests"] == LIMIT and set(needle["by_variant"]) == {
        "single-number",
        "single-uuid",
        "multikey",
        "multivalue",
        "multiquery",
    }
    assert needle["heatmap"]["values"] == [[1.0, 1.0]] * 3

    # GSM8K: the figures are exactly what the answer key says for these questions.
    oracle = Gsm8kOracle.load(None, ORACLE_ACCURACY)
    answers = [oracle.answer(row["question"]) for row in gsm8k_suite.load_test()[:LIMIT]]
    right = sum(a.is_correct for a in answers)
    strict_right = sum(a.is_correct and a.text.startswith(FORMATS[0].split("\n")[0]) for a in answers)
    for mode in ("deploytool thinking-off", "deploytool thinking-on"):
        figures = report.suite("gsm8k").figures["modes"][mode]
        assert figures["flexible_correct"] == right
        assert figures["strict_correct"] == strict_right < right  # strict sees only '#### N'
        assert figures["ci95_wilson"][0] < right / LIMIT < figures["ci95_wilson"][1]
        assert len(figures["per_question"]) == LIMIT and figures["per_question"].count("1") == right
    lm = report.suite("gsm8k").figures["modes"]["lm-eval thinking-off"]
    assert lm["strict-match_correct"] == strict_right and lm["flexible-extract_correct"] <= right
    assert report.suite("gsm8k").figures["modes"]["lm-eval thinking-on"]["sampling"]["temperature"] == 0.6
    assert report.suite("gsm8k").limited

    stress = report.suite("stress").figures
    assert len(stress["requests"]) == 8 and all(r["ok"] for r in stress["requests"])
    long = next(r for r in stress["requests"] if r["request"] == "long-prompt")
    assert 18_000 <= long["prompt_tokens"] <= 20_000
    assert all(
        r["completion_tokens"] == 1000 for r in stress["requests"] if r["request"].startswith("sampled")
    )
    assert stress["probes"]["idle_accuracy"] == stress["probes"]["loaded_accuracy"] == 1.0
    assert stress["probes"]["loaded_overlapping_the_load"] >= 1
    assert (
        stress["long_prompt_needles"]["string_match_all"] == 1.0
        and len(stress["long_prompt_needles"]["expected"]) == 4
    )
    assert stress["long_prompt_cached_share"] <= 0.05
    assert stress["itl_during_long_prefill"]["whole_run"]["gaps"] > 0

    doc = json.loads((tmp_path / "report" / "results.json").read_text())
    assert doc["schema"] == "deploytool.qualify/v1" and doc["verdict"] == "passed" and doc["limit"] == LIMIT
    assert [s["name"] for s in doc["suites"]] == OURS
    assert {"name", "verdict", "reason", "figures", "gates", "method", "transcripts", "settings"} <= set(
        doc["suites"][0]
    )
    html = (tmp_path / "report" / "report.html").read_text()
    assert "PASSED" in html and "--limit 20" in html
    assert 'class="heatmap"' in html and "string_match_all by depth" in html
    assert "Quick run" in (tmp_path / "report" / "report.md").read_text()


@pytest.mark.parametrize(
    "fault, suites, reason",
    [
        ("bad_tool_json", ["tools"], {"tools": "arguments are not valid JSON"}),
        (
            "drop_stream=3",
            ["tools", "needle", "stress"],
            {"tools": "stream dropped", "needle": "stream dropped", "stress": "stream dropped"},
        ),
        (
            "http_500_every=3",
            ["vision", "tools", "needle", "gsm8k", "stress"],
            dict.fromkeys(["vision", "tools", "needle", "gsm8k", "stress"], "HTTP 500"),
        ),
    ],
)
def test_each_fault_fails_its_suites_with_the_cause_named(
    fault: str, suites: list[str], reason: dict, tmp_path: Path
) -> None:
    with sim(faults=(fault,), gsm8k_oracle=1.0) as handle:
        report = qualify(handle.url, tmp_path, suites=suites)
    assert report.exit_code == 1, report.summary_line()
    for name, cause in reason.items():
        result = report.suite(name)
        assert result.verdict is Verdict.FAILED, (name, result.reason)
        assert cause in result.reason, (name, result.reason)
        assert any(not t["passed"] for t in result.transcripts)  # the failure's transcript is kept


def test_bad_tool_json_wrong_types_are_caught_too(tmp_path: Path) -> None:
    with sim(faults=("bad_tool_json",)) as handle:
        report = qualify(handle.url, tmp_path, suites=["tools"])
    problems = [p for t in report.suite("tools").transcripts for p in t["problems"]]
    assert any("is not of type" in p for p in problems), problems  # the even calls: valid JSON, wrong types


def test_never_ready_cannot_run(tmp_path: Path) -> None:
    with sim(faults=("never_ready",)) as handle:
        report = qualify(handle.url, tmp_path, overrides={"preflight": {"ready_timeout_s": 0.5}})
    assert report.exit_code == 6 and not report.passed  # could not run
    assert "never became ready" in report.could_not_run and "503" in report.could_not_run
    pre = report.suite("preflight")
    assert pre.verdict is Verdict.FAILED and "503" in pre.reason
    assert all(report.suite(n).verdict is Verdict.ERROR for n in OURS[1:])


def test_reasoning_inline_in_content_fails_the_contract(tmp_path: Path) -> None:
    with sim(no_reasoning_field=True) as handle:
        report = qualify(handle.url, tmp_path, suites=["contract"])
    contract = report.suite("contract")
    assert contract.verdict is Verdict.FAILED and report.exit_code == 1
    assert "reasoning_content" in contract.reason and "<think>" in contract.reason
    assert contract.figures["measured"]["reasoning_field"] == "content"


def test_thinking_on_by_default_breaks_the_contract(tmp_path: Path) -> None:
    # SGLang with --reasoning-parser qwen3 and no --default-chat-template-kwargs: the parser's
    # 'enable_thinking' mode thinks when the request does not say
    with sim(default_chat_template_kwargs=None) as handle:
        report = qualify(handle.url, tmp_path, suites=["contract"])
    contract = report.suite("contract")
    assert "thinking default: measured on, needs == off" in contract.reason
    assert "default-chat-template-kwargs" in contract.reason  # what to change, named
    assert contract.figures["server_configuration"]["reasoning_parser"] == "qwen3"


def test_contract_compares_with_the_previous_release(healthy, tmp_path: Path) -> None:
    """The previous release's own results.json (served under another name, shorter context)."""
    with sim(served_model_name="qwen-prod", context_length=131072, max_total_tokens=140_000) as old:
        before = qualify(old.url, tmp_path / "old", suites=["contract"])
    assert before.passed
    previous = tmp_path / "old" / "report" / "results.json"
    report = qualify(healthy.url, tmp_path, suites=["contract"], previous_results=previous)
    contract = report.suite("contract")
    assert contract.verdict is Verdict.FAILED
    assert contract.figures["compared_with"] == f"previous release ({previous})"
    assert "served_model_name: measured sim-model, needs == qwen-prod" in contract.reason
    assert "context_length: measured 262144, needs == 131072" in contract.reason
    assert "port: measured" in contract.reason  # each sim listens on its own port


def test_gsm8k_gate_fails_below_min_accuracy(tmp_path: Path) -> None:
    with sim(gsm8k_oracle=0.5) as handle:
        report = qualify(handle.url, tmp_path, suites=["gsm8k"], overrides={"gsm8k": {"thinking": [False]}})
    gsm8k = report.suite("gsm8k")
    assert gsm8k.verdict is Verdict.FAILED and "deploytool thinking-off flexible accuracy" in gsm8k.reason
    assert gsm8k.figures["modes"]["deploytool thinking-off"]["flexible_accuracy"] < 0.8


def test_preflight_gates_on_kv_pool_and_running_requests(tmp_path: Path) -> None:
    with sim(max_total_tokens=100_000, max_running_requests=4) as handle:
        report = qualify(
            handle.url, tmp_path, suites=["preflight"], overrides={"preflight": {"min_running_requests": 8}}
        )
    reason = report.suite("preflight").reason
    assert (
        "KV pool tokens (max_total_num_tokens) >= context length: measured 100000, needs >= 262144" in reason
    )
    assert "running-request limit: measured 4, needs >= 8" in reason


def test_suites_that_do_not_apply_are_skipped_with_the_reason(tmp_path: Path) -> None:
    with sim(vision=False) as handle:
        report = qualify(handle.url, tmp_path, suites=["vision"])
        assert report.suite("vision").verdict is Verdict.SKIPPED
        assert "has no" in report.suite("vision").reason or "no images" in report.suite("vision").reason
        assert report.exit_code == 6  # nothing ran: not a pass
        profile = sim_profile(handle.settings.port, vision=False, tools=False)
        report = qualify(handle.url, tmp_path, profile=profile, suites=["preflight", "vision", "tools"])
    assert (
        report.suite("vision").reason == "profile 'sim' says the model takes no images (model.vision: false)"
    )
    assert report.suite("tools").verdict is Verdict.SKIPPED
    assert report.passed  # preflight passed; skipped suites neither pass nor fail it


def test_slow_server_times_out_instead_of_hanging(tmp_path: Path) -> None:
    with sim(decode_tps=2) as handle:
        report = qualify(
            handle.url,
            tmp_path,
            suites=["contract", "stress"],
            overrides={
                "contract": {"request_timeout_s": 0.5},
                "stress": {"budget_s": 1.0, "long_prompt_tokens": 0},
            },
        )
    assert "timed out after 0.5 s" in report.suite("contract").reason
    stress = report.suite("stress")
    assert stress.verdict is Verdict.ERROR and "budget of 1 s" in stress.reason
    assert report.exit_code == 1


def test_ctrl_c_leaves_a_partial_report_marked_incomplete(healthy, tmp_path: Path, monkeypatch) -> None:
    tools = registry()["tools"]

    async def interrupted(ctx):
        raise KeyboardInterrupt

    monkeypatch.setattr(tools, "run", interrupted)
    report = qualify(healthy.url, tmp_path, suites=["preflight", "tools", "gsm8k"])
    assert report.incomplete and report.interrupted and report.exit_code == 6 and not report.passed
    assert report.suite("preflight").verdict is Verdict.PASSED
    assert report.suite("tools").verdict is Verdict.ERROR
    # The suite that was running is named as such; the ones after it were never started.
    assert report.suite("tools").reason.startswith("interrupted while running"), report.suite("tools").reason
    assert report.suite("gsm8k").reason.startswith("not run"), report.suite("gsm8k").reason
    assert (
        "interrupted" in report.suite("gsm8k").reason and "while running" not in report.suite("gsm8k").reason
    )
    doc = json.loads((tmp_path / "report" / "results.json").read_text())
    assert doc["incomplete"] is True and doc["verdict"] == "incomplete"


def test_profile_settings_are_validated_with_the_field_named(healthy, tmp_path: Path) -> None:
    profile = sim_profile(healthy.settings.port)
    profile.qualify = {"gsm8k": {"min_acuracy": 0.9}}
    with pytest.raises(ProfileError, match=r"qualify\.gsm8k\.min_acuracy: unknown setting"):
        qualify(healthy.url, tmp_path, profile=profile)
    profile.qualify = {"needles": {}}
    with pytest.raises(ProfileError, match=r"qualify\.needles: no such suite"):
        qualify(healthy.url, tmp_path, profile=profile)
    profile.qualify = {"suites": ["preflight", "gsm9k"]}
    with pytest.raises(ProfileError, match="unknown suite"):
        run_qualification(Target(url=healthy.url, profile=profile), report_dir=tmp_path)
    with pytest.raises(UsageError, match="min_accuracy"):
        qualify(healthy.url, tmp_path, overrides={"gsm8k": {"min_accuracy": 3}})


def test_profile_selects_suites_and_flags_override_it(healthy, tmp_path: Path) -> None:
    profile = sim_profile(healthy.settings.port)
    profile.qualify = {"suites": ["preflight", "contract"], "preflight": {"min_running_requests": 64}}
    report = run_qualification(Target(url=healthy.url, profile=profile), report_dir=tmp_path / "a")
    assert [s.name for s in report.suites] == ["preflight", "contract"]
    assert "running-request limit: measured 16, needs >= 64" in report.suite("preflight").reason
    report = run_qualification(
        Target(url=healthy.url, profile=profile),
        report_dir=tmp_path / "b",
        overrides={"preflight": {"min_running_requests": 8}},
    )
    assert report.passed
