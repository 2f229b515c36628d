"""GSM8K's lm-eval-compatible mode scores exactly as lm-evaluation-harness 0.4 does, and a
release that loses questions the previous one got right fails the paired test."""

from __future__ import annotations

import json
from pathlib import Path

from qualify_helpers import qualify, sim

from deploytool.qualify import Verdict
from deploytool.qualify.paired import compare, mcnemar_exact_p
from deploytool.qualify.suites.gsm8k import lmeval


def test_filters_and_normalisation_are_lm_evals() -> None:
    # Replies in common formats, with what lm-eval 0.4.13's own RegexFilter and exact_match give
    # for them (checked by running lm-eval's code on these strings).
    cases = {
        "So the total is 18 apples.\n#### 18": ("18", "18", True, True),
        "The answer is $1,234.00. That is the total after all 3 steps.": ("[invalid]", "3", False, False),
        "The final answer is \\boxed{18}.": ("[invalid]", "18", False, True),
        "#### 5.50": ("5.50", "5.50", False, False),  # lm-eval compares strings: 5.50 is not 5.5
    }
    for reply, (strict, flexible, strict_ok, flexible_ok) in cases.items():
        target = "#### 1234" if "1,234" in reply else "#### 18" if "18" in reply else "#### 5.5"
        got = lmeval.extract(reply)
        assert (got["strict-match"], got["flexible-extract"]) == (strict, flexible), reply
        assert lmeval.exact_match(got["strict-match"], target) is strict_ok, reply
        assert lmeval.exact_match(got["flexible-extract"], target) is flexible_ok, reply


def test_fewshot_draws_follow_lm_evals_sampler() -> None:
    draws = lmeval.fewshot_indices(3)
    assert all(len(d) == 5 and len(set(d)) == 5 for d in draws) and draws[0] != draws[1]
    messages = lmeval.messages("How many?", draws[0])
    assert [m["role"] for m in messages] == ["user", "assistant"] * 5 + ["user"]
    # lm-eval 0.4.13's first gsm8k document opens with this train problem (its logged prompt).
    assert messages[0]["content"].startswith("Question: Jen and Tyler are gymnasts practicing flips.")
    assert messages[0]["content"].endswith("\nAnswer:") and "<<16*3=48>>" in messages[1]["content"]
    assert messages[-1] == {"role": "user", "content": "Question: How many?\nAnswer:"}


def test_mcnemar_exact_p_values() -> None:
    assert mcnemar_exact_p(0, 0) == 1.0
    assert mcnemar_exact_p(10, 0) == 2 / 1024
    assert abs(mcnemar_exact_p(3, 7) - 0.34375) < 1e-9
    paired = compare("1101", "1011")
    assert (paired.got_worse, paired.got_better, paired.questions) == ([1], [2], 4)


def test_a_significant_drop_fails_even_above_min_accuracy(tmp_path: Path) -> None:
    overrides = {"gsm8k": {"thinking": [False], "min_accuracy": 0.8, "styles": ["deploytool"]}}
    with sim(gsm8k_oracle=0.98) as before:
        old = qualify(before.url, tmp_path / "old", suites=["gsm8k"], limit=300, overrides=overrides)
    assert old.passed, old.summary_line()
    previous = tmp_path / "old" / "report" / "results.json"
    with sim(gsm8k_oracle=0.9) as now:
        report = qualify(
            now.url, tmp_path, suites=["gsm8k"], limit=300, overrides=overrides, previous_results=previous
        )
    gsm8k = report.suite("gsm8k")
    figures = gsm8k.figures["modes"]["deploytool thinking-off"]
    assert figures["flexible_accuracy"] >= 0.8  # above the floor ...
    assert gsm8k.verdict is Verdict.FAILED  # ... and still failed: the same questions went wrong
    assert "no significant drop vs the previous release (McNemar exact)" in gsm8k.reason
    flipped = figures["vs_previous"]
    assert flipped["got_better"] == 0 and flipped["got_worse"] >= 10 and flipped["p_value"] < 0.05
    assert flipped["flipped_to_wrong"] and all(0 <= i < 300 for i in flipped["flipped_to_wrong"])
    doc = json.loads((tmp_path / "report" / "results.json").read_text())
    assert doc["suites"][0]["figures"]["modes"]["deploytool thinking-off"]["per_question"].count("0") > 0


def test_lm_eval_mode_counts_replies_cut_at_max_tokens(tmp_path: Path) -> None:
    with sim(gsm8k_oracle=1.0) as handle:
        report = qualify(
            handle.url,
            tmp_path,
            suites=["gsm8k"],
            limit=10,
            overrides={"gsm8k": {"thinking": [True], "styles": ["lm-eval"], "max_tokens_thinking": 16}},
        )
    figures = report.suite("gsm8k").figures["modes"]["lm-eval thinking-on"]
    assert figures["cut_at_max_tokens"] == 10 and figures["sampling"]["top_k"] == 20
    assert "10 cut at max_tokens" in report.suite("gsm8k").reason
