"""`deploytool report RELEASE [--against RELEASE]`: the cutover report for any two releases of a
slot (their stored qualifications under the state folder) or any two report folders, through
the real CLI in a child process."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from conftest import run_cli
from cutover_docs import results

from deploytool.host.slots import Slot
from deploytool.release.state import journal, release_path

CPU = Slot()


def deploytool(*args: str) -> subprocess.CompletedProcess:
    return run_cli(*args)


def store(number: int, doc: dict, image: str, where: str = "qualify") -> Path:
    folder = release_path(CPU.name, number) / where
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps(doc))
    (release_path(CPU.name, number) / "release.json").write_text(
        json.dumps({"profile": "sim", "image": image})
    )
    return folder


def test_a_release_is_compared_with_the_one_that_served_before_it_by_default():
    store(1, results(decode=400.0), "deploytool/sim:one")
    store(2, results(decode=200.0, seed=4), "deploytool/sim:two")
    store(3, results(decode=400.0, seed=8), "deploytool/sim:three")
    journal("cutover", slot=CPU.name, release=1, previous=None)
    journal("cutover", slot=CPU.name, release=2, previous=1)
    done = deploytool("report", "2", "--cpu", "--json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["against"].startswith("release 1 (it served before release 2")
    assert (
        "decode, 1 request" in answer["headline"] and "worse beyond the measured spread" in answer["headline"]
    )
    folder = Path(answer["report"])
    assert folder.parent == release_path(CPU.name, 2) / "reports"
    comparison = json.loads((folder / "comparison.json").read_text())
    assert "image: deploytool/sim:one -> deploytool/sim:two" in comparison["changes"]
    html = (folder / "report.html").read_text()
    assert "WORSE, beyond the spread" in html and 'img src="data:image/png;base64,' in html
    sources = json.loads((folder / "sources.json").read_text())
    assert sources["release"].endswith("releases/2/qualify/results.json")
    assert sources["against"].endswith("releases/1/qualify/results.json")
    # the listing shows each qualification once, the report folder not as another one
    listed = json.loads(deploytool("reports", "--cpu", "--json").stdout)["reports"]
    assert sorted(e["release"] for e in listed) == [1, 2, 3]

    # any two: release 3 against release 2 (faster: better beyond the spread, nothing worse)
    done = deploytool("report", "3", "--against", "2", "--cpu")
    assert done.returncode == 0, done.stderr
    assert "no figure worse beyond the measured spread" in done.stdout
    assert done.stdout.strip().endswith("report.html")


def test_two_report_folders_and_the_refusals(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, doc in ((a, results()), (b, results(seed=3))):
        folder.mkdir()
        (folder / "results.json").write_text(json.dumps(doc))
    done = deploytool("report", str(b), "--against", str(a), "--report", str(tmp_path / "out"), "--json")
    assert done.returncode == 0, done.stderr
    assert "no figure worse" in json.loads(done.stdout)["headline"]
    assert (tmp_path / "out" / "report.md").read_text().startswith("# deploytool qualify: PASSED")

    refused = deploytool("report", str(b), "--json")  # a folder has no rule to find its baseline
    assert refused.returncode == 2 and json.loads(refused.stdout)["error"]["message"].startswith(
        "--against: "
    )
    missing = deploytool("report", "7", "--cpu")
    assert missing.returncode == 2 and "no stored qualify results for release 7" in missing.stderr
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "results.json").write_text("[1, 2]")
    junk = deploytool("report", str(tmp_path / "junk"), "--against", str(a))
    assert junk.returncode == 2 and "not a qualify results.json" in junk.stderr


def test_up_and_rollout_end_with_the_cutover_report():
    from types import SimpleNamespace

    from deploytool.cli.deploy_cmds import _up_line
    from deploytool.deploy.rollout import RolloutResult, SlotOutcome

    up = SimpleNamespace(
        release=2,
        slot="cpu",
        profile="sim",
        url="http://127.0.0.1:1",
        previous=1,
        seconds=3.0,
        qualify={"report_dir": "/state/slots/cpu/releases/2/qualify"},
    )
    assert _up_line(up).endswith("; cutover report: /state/slots/cpu/releases/2/qualify/report.html")
    assert "cutover report" not in _up_line(
        SimpleNamespace(**{**vars(up), "qualify": None})
    )  # --skip-qualify
    done = RolloutResult(
        id="r1",
        profile="sim",
        image="i",
        ok=True,
        slots=[
            SlotOutcome("a", "upgraded", 2, 1, report="/s/a/report.html"),
            SlotOutcome("b", "untouched", 1, 1),
        ],
    )
    assert done.lines()[-1] == "cutover report: slot a: /s/a/report.html"


def _with_regression_gate(doc: dict, against: str | None, *, passed: bool = True) -> dict:
    """A performance suite as a qualification with max_regression_pct leaves it: its settings, the
    gate it judged against the release named (results.json `baseline`)."""
    perf = doc["suites"][0]
    perf["settings"] = {"max_regression_pct": 10, "regression_floor_s": 0.02}
    perf["gates"] = [
        {
            "name": "failed requests",
            "passed": True,
            "measured": 0,
            "threshold": 0,
            "comparison": "<=",
            "detail": "",
            "unit": "",
        },
        {
            "name": "regression: decode, 1 request",
            "passed": passed,
            "measured": 0.0,
            "threshold": 10,
            "comparison": "<=",
            "detail": f"worse than {against}",
            "unit": "%",
        },
    ]
    doc["baseline"] = f"{against} (it served before this release was cut over)" if against else None
    return doc


def test_report_against_another_release_judges_the_comparing_gates_against_it():
    store(1, _with_regression_gate(results(decode=400.0), None), "deploytool/sim:one")
    store(2, _with_regression_gate(results(decode=800.0, seed=4), "release 1"), "deploytool/sim:two")
    store(3, _with_regression_gate(results(decode=400.0, seed=8), "release 1"), "deploytool/sim:three")
    done = deploytool("report", "3", "--against", "2", "--cpu", "--json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    # release 3's own qualification passed against release 1; against release 2 it is 50% slower
    assert answer["headline"].startswith(
        "qualify FAILED, its comparing gates judged against release 2 "
        "(its qualification: PASSED, against release 1); against release 2 "
        "(--against): "
    ), answer["headline"]
    folder = Path(answer["report"])
    comparison = json.loads((folder / "comparison.json").read_text())
    assert comparison["verdict"] == "failed" and comparison["qualified"] == "PASSED, against release 1"
    assert any(
        line.startswith("performance: regression: decode, 1 request: measured 50")
        for line in comparison["why"]
    )
    md = (folder / "report.md").read_text()
    assert (
        md.startswith("# deploytool qualify: FAILED") and "its comparing gates judged against release 2" in md
    )
    # the rule's own baseline (release 1, as qualified): the stored verdict, said as before
    same = json.loads(deploytool("report", "3", "--against", "1", "--cpu", "--json").stdout)
    assert same["headline"].startswith("qualify PASSED; against release 1 (--against): no figure worse")


def test_a_limited_or_unqualified_baseline_is_said_on_the_first_screen():
    limited = results(gsm8k="1111")
    limited["limit"] = 4
    store(1, limited, "deploytool/sim:one")
    store(2, results(seed=3, gsm8k="1111000000"), "deploytool/sim:two")
    journal("cutover", slot=CPU.name, release=2, previous=1)
    done = json.loads(deploytool("report", "2", "--cpu", "--json").stdout)
    assert (
        "release 1 was qualified with --limit 4, this release without --limit: its data-driven figures cover "
        "other items (GSM8K is compared on the questions both runs answered)"
    ) in done["headline"]
    rows = {
        r["figure"]: r for r in json.loads((Path(done["report"]) / "comparison.json").read_text())["rows"]
    }
    gsm = rows["GSM8K accuracy, deploytool thinking-off (flexible), the 4 questions both runs answered"]
    assert (gsm["before"], gsm["after"]) == (1.0, 1.0) and "of 4 before and 10 now" in gsm["spread"]

    # release 4 served after release 3, which was brought up with --skip-qualify
    store(4, results(seed=5), "deploytool/sim:four")
    (release_path(CPU.name, 3)).mkdir(parents=True)
    journal("qualify.skipped", slot=CPU.name, release=3, reason="--skip-qualify")
    journal("cutover", slot=CPU.name, release=4, previous=3)
    done = json.loads(deploytool("report", "4", "--cpu", "--json").stdout)
    assert done["headline"] == (
        "qualify PASSED; release 3 was not qualified (brought up with --skip-qualify): "
        "nothing to compare with"
    )
    assert "no baseline release" not in (Path(done["report"]) / "report.md").read_text()
    refused = deploytool("report", "4", "--against", "3", "--cpu")
    assert (
        refused.returncode == 2
        and "release 3 was not qualified (brought up with --skip-qualify)" in refused.stderr
    )
