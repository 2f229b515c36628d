"""Scoring units: GSM8K extraction on real-looking outputs, intervals, keyword groups."""

from __future__ import annotations

import pytest

from deploytool.qualify.scoring import (
    extract_flexible,
    extract_strict,
    gold_answer,
    missing_keyword_groups,
    normal_interval,
    normalize_number,
    wilson_interval,
)


@pytest.mark.parametrize(
    "text, strict, flexible",
    [
        ("She sells 9 eggs at $2 each.\n#### 18", "18", "18"),
        ("Janet makes 9 * 2 = 18 dollars. The answer is 1,234.", None, "1234"),
        ("So the total is \\boxed{18}.", None, "18"),
        ("The final answer is \\boxed{18}. (Answer key entry 19 of 1319.)", None, "18"),
        ("The answer is $18.00. That is the total after all 3 steps.", None, "18"),
        ("The temperature dropped to -7 degrees.\n#### -7", "-7", "-7"),
        ("Each share costs 2.5 dollars, so the answer is 12.75", None, "12.75"),
        ("First 3 + 4 = 7, then 7 * 2 = 14.\n#### 14\nI hope this helps with your 2 questions!", "14", "14"),
        ("We add 5 and 6 to get 11 apples in all.", None, "11"),
        ("#### 1,000,000", "1000000", "1000000"),
        ("No number here at all.", None, None),
    ],
)
def test_gsm8k_extraction(text: str, strict: str | None, flexible: str | None) -> None:
    assert extract_strict(text) == strict
    assert extract_flexible(text) == flexible


def test_flexible_prefers_the_marked_answer_over_a_later_number() -> None:
    # "the last number" would give 3 here; the marked answer is 18.
    assert extract_flexible("The answer is 18. Note that she keeps 3 eggs for breakfast.") == "18"


def test_normalize_number() -> None:
    assert normalize_number("$1,234.50") == "1234.5"
    assert normalize_number("18.00") == "18"
    assert normalize_number("-0.5") == "-0.5"
    assert normalize_number(".") is None


def test_gold_answer_reads_the_reference() -> None:
    assert gold_answer("9 * 2 = <<9*2=18>>18 every day.\n#### 18") == "18"
    with pytest.raises(ValueError):
        gold_answer("no final line")


def test_wilson_interval_known_values() -> None:
    # 90/100: the Wilson 95% interval is about [0.8256, 0.9448].
    iv = wilson_interval(90, 100)
    assert iv.low == pytest.approx(0.8256, abs=5e-4)
    assert iv.high == pytest.approx(0.9448, abs=5e-4)
    # At 100% the normal interval collapses to a point; Wilson does not.
    assert normal_interval(20, 20).low == 1.0
    assert wilson_interval(20, 20).low < 0.9
    assert wilson_interval(0, 0).low == 0.0 and wilson_interval(0, 0).high == 1.0


def test_normal_interval_known_values() -> None:
    iv = normal_interval(90, 100)
    assert iv.low == pytest.approx(0.9 - 1.96 * 0.03, abs=1e-3)
    assert iv.high == pytest.approx(0.9 + 1.96 * 0.03, abs=1e-3)


def test_every_keyword_group_must_match() -> None:
    groups = [["2", "two"], ["4", "four"]]
    assert missing_keyword_groups("2 and 4.", groups) == []
    assert missing_keyword_groups("Two and four", groups) == []
    # one group matching is not enough (an OR of groups would wrongly pass this)
    assert missing_keyword_groups("2 and 5", groups) == [["4", "four"]]
    # whole words only: "320x240" holds no "2" and no "4"
    assert missing_keyword_groups("image 320x240", groups) == groups
