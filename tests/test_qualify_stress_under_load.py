"""Correctness under load: a server that answers right when idle and wrong when busy fails the
stress suite, naming the probes that went wrong; the ITL figures are computed from real gaps."""

from __future__ import annotations

from pathlib import Path

from qualify_helpers import qualify, sim

from deploytool.qualify import Verdict
from deploytool.qualify.suites.stress.loadcheck import itl_during, long_prompt
from deploytool.server.client import ChatResult

# Each sampled generation (1000 tokens) streams for about a second, so the load is still in
# flight when the probes go out even on a busy machine (at the suites' default 5000 tokens/s it
# lasted 0.2 s, and a stall of the test process could let it finish before the probes were sent).
LOADED_SIM = {"gsm8k_oracle": 1.0, "decode_tps": 1000}


def test_answers_corrupted_only_under_load_fail_stress(tmp_path: Path) -> None:
    with sim(faults=("corrupt_under_load=4",), **LOADED_SIM) as handle:
        report = qualify(handle.url, tmp_path, suites=["stress"])
    stress = report.suite("stress")
    assert stress.verdict is Verdict.FAILED and report.exit_code == 1
    probes = stress.figures["probes"]
    assert probes["idle_accuracy"] == 1.0 and probes["loaded_accuracy"] < 0.87
    assert "probe accuracy under load: measured" in stress.reason and "wrong under load: ['" in stress.reason
    assert all(
        r["ok"] for r in stress.figures["requests"]
    )  # every stream completed: only the answers were wrong


def test_the_clean_sim_answers_as_well_under_load_as_idle(tmp_path: Path) -> None:
    with sim(**LOADED_SIM) as handle:
        report = qualify(handle.url, tmp_path, suites=["stress"])
    stress = report.suite("stress")
    assert stress.verdict is Verdict.PASSED, stress.reason
    assert stress.figures["probes"]["loaded_accuracy"] == stress.figures["probes"]["idle_accuracy"] == 1.0


def test_the_long_prompt_opens_uniquely_and_carries_every_needle() -> None:
    a, b = long_prompt(300, 4), long_prompt(300, 4)
    assert a.prompt.splitlines()[0] != b.prompt.splitlines()[0] and len(a.answers) == 4
    assert all(value in a.prompt for value in a.answers)


def test_itl_during_prefill_counts_only_gaps_inside_the_window() -> None:
    stream = ChatResult(chunk_times=[0.0, 0.1, 0.2, 1.2, 1.3, 3.0])
    long = ChatResult(t_start=0.05, t_first_token=1.25, t_end=2.0)
    figures = itl_during([stream], long)
    assert figures["during_prefill"]["gaps"] == 3  # the tokens at 0.1, 0.2 and 1.2
    assert figures["during_prefill"]["max_s"] == 1.0 and figures["whole_run"]["gaps"] == 5
