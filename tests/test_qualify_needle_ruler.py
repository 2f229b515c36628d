"""The needle suite as RULER builds and scores it, and a server that loses needles past a
length fails that length's gate, naming it."""

from __future__ import annotations

import random
import re
from pathlib import Path

from qualify_helpers import qualify, sim

from deploytool.qualify import Verdict
from deploytool.qualify.prose import sentences
from deploytool.qualify.ruler import VARIANTS, build, string_match_all


def test_samples_follow_rulers_templates() -> None:
    haystack = sentences(200, seed=7)
    single = build("single-number", haystack, 0.5, random.Random(1))
    assert single.prompt.startswith("A special magic number is hidden within the following text.")
    assert re.search(
        r"What is the special magic number for \w+-\w+ mentioned in the provided text\?$", single.prompt
    )
    assert "One of the special magic numbers for" in single.prompt and len(single.answers) == 1
    uuid = build("single-uuid", haystack, 0.1, random.Random(2))
    assert re.fullmatch(r"[0-9a-f-]{36}", uuid.answers[0]) and "special magic uuid for" in uuid.prompt
    multiquery = build("multiquery", haystack, 0.9, random.Random(3))
    assert len(multiquery.answers) == 4 and ", and " in multiquery.prompt.splitlines()[-1]
    assert multiquery.prompt.startswith("Some special magic numbers are hidden")
    multikey = build("multikey", haystack, 0.5, random.Random(4))
    assert multikey.prompt.count("One of the special magic numbers for") == 4 and len(multikey.answers) == 1
    multivalue = build("multivalue", haystack, 0.5, random.Random(5))
    assert len(set(multivalue.answers)) == 4
    # the asked needle sits at its depth: after round(depth * n) prose sentences
    body = single.prompt.split("\n")[1]
    assert abs(body.find("One of the special") / len(body) - 0.5) < 0.05
    assert set(VARIANTS) == {"single-number", "single-uuid", "multikey", "multivalue", "multiquery"}


def test_prose_is_varied_and_holds_no_digits_or_needle_words() -> None:
    text = sentences(2000, seed=1)
    assert len(set(text)) > 1900  # not a repeated loop
    joined = " ".join(text)
    assert not re.search(r"\d", joined) and "magic" not in joined and "special" not in joined


def test_string_match_all_is_rulers() -> None:
    assert string_match_all("The numbers are 1234567 and 7654321.", ["1234567", "7654321"]) == 1.0
    assert string_match_all("Only 1234567.", ["1234567", "7654321", "1111111", "2222222"]) == 0.25
    assert string_match_all("ABC-DEF", ["abc-def"]) == 1.0


def test_a_server_that_loses_needles_past_a_length_fails_that_length(tmp_path: Path) -> None:
    with sim(faults=("needle_lost_after=12000",)) as handle:
        report = qualify(
            handle.url,
            tmp_path,
            suites=["needle"],
            overrides={
                "needle": {
                    "target_tokens": 20_000,
                    "lengths": [4096, 8192],
                    "depths": [0.1, 0.3, 0.5, 0.7, 0.9],
                }
            },
        )
    needle = report.suite("needle")
    assert needle.verdict is Verdict.FAILED and report.exit_code == 1
    assert "string_match_all at 20000 tokens: measured 0.0, needs >= 0.9" in needle.reason
    assert "4096 tokens" not in needle.reason and "8192 tokens" not in needle.reason
    by_length = {row["length"]: row["accuracy"] for row in needle.figures["by_length"]}
    assert by_length == {4096: 1.0, 8192: 1.0, 20_000: 0.0}
    assert needle.figures["heatmap"]["values"] == [[1.0, 1.0, 0.0]] * 5
    html = (tmp_path / "report" / "report.html").read_text()
    assert "Heat map: heatmap" in html and "rgb(255,0,80)" in html  # the lost column drawn red
