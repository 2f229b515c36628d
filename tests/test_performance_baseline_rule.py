"""Which release the performance gate compares with: a written rule, named in the verdict.
After a rollback to release 1, release 1 is never compared with release 2, the release just
rolled back from; `--against N` chooses; a regression's reason keeps its unit."""

from __future__ import annotations

import json

import pytest
from deploy_facts import release

from deploytool.checks.targets import baseline_release
from deploytool.errors import UsageError
from deploytool.host.slots import Slot
from deploytool.qualify.suite_api import Gate, SuiteResult, Verdict
from deploytool.release.state import journal, release_path

CPU = Slot()


def stored_results(number: int) -> None:
    folder = release_path(CPU.name, number) / "qualify"
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"suites": []}))


def test_after_a_rollback_the_baseline_is_what_served_before_the_release_not_the_one_rolled_back_from():
    for n in (1, 2):
        stored_results(n)
    journal("cutover", slot=CPU.name, release=1, previous=None)
    journal("cutover", slot=CPU.name, release=2, previous=1)
    journal("rollback", slot=CPU.name, release=1, stopped=2)
    releases = [release(1, "running"), release(2)]
    chosen = baseline_release(CPU, releases, 1)
    assert chosen.release is None and "first" in chosen.describe()
    # release 2 again (a later up): compared with release 1, which served before it
    second = baseline_release(CPU, releases, 2)
    assert second.release == 1 and second.describe().startswith("release 1 (it served before release 2")


def test_against_chooses_and_is_checked():
    stored_results(2)
    releases = [release(1, "running"), release(2), release(3)]
    assert baseline_release(CPU, releases, 1, against=2).describe() == "release 2 (--against)"
    with pytest.raises(UsageError, match="no stored qualify results"):
        baseline_release(CPU, releases, 1, against=3)
    with pytest.raises(UsageError, match="being qualified"):
        baseline_release(CPU, releases, 1, against=1)


def test_without_a_journal_line_the_newest_older_release_is_taken_and_said():
    stored_results(4)
    chosen = baseline_release(CPU, [release(4), release(6, "running")], 6)
    assert chosen.release == 4 and "no cut-over line" in chosen.describe()


def test_a_failed_regression_reason_says_its_unit_on_both_sides():
    result = SuiteResult(
        name="performance",
        verdict=Verdict.ERROR,
        gates=[
            Gate(
                name="regression: decode",
                threshold=25.0,
                measured=49.9,
                passed=False,
                comparison="<=",
                unit="%",
                detail="worse than release 1 (398.6 -> 199.6 tok/s)",
            )
        ],
    )
    result.judge()
    assert "measured 49.9%, needs <= 25.0% (worse than release 1" in result.reason
