"""The memory gate's decisions without an engine: fits, refuses, skips (journaled), or has
nothing to judge by and says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploytool.errors import DeployError
from deploytool.memory.gate import memory_gate
from deploytool.profiles import load_profile
from deploytool.state import read_journal

MODELS = Path(__file__).parent / "data" / "models"


class Slot:
    name, is_cpu, gpus = "cpu", True, ()


class Reporter:
    def __init__(self):
        self.steps, self.warnings = [], []

    def step(self, message):
        self.steps.append(message)

    def warn(self, message):
        self.warnings.append(message)


def _profile(**args):
    profile = load_profile("sim").model_copy(deep=True)
    profile.model.host_path = str(MODELS / "qwen3-30b-a3b")
    profile.match.gpu_name = ["NVIDIA H200"]
    profile.server.args.update(args)
    return profile


def test_a_plan_that_fits_is_journaled_and_returned() -> None:
    reporter = Reporter()
    plan = memory_gate(Slot(), _profile(**{"mem-fraction-static": 0.85}), skip=False, release=3, reporter=reporter)
    assert plan is not None and plan.fits
    entry = read_journal("cpu", limit=1)[-1]
    assert entry["event"] == "memory_plan" and entry["verdict"] == "fits" and entry["release"] == 3
    assert "memory plan on NVIDIA H200" in reporter.steps[0]


def test_a_plan_that_does_not_fit_is_refused_unless_skipped() -> None:
    short = _profile(**{"mem-fraction-static": 0.5})
    with pytest.raises(DeployError, match="does not fit") as refused:
        memory_gate(Slot(), short, skip=False, release=4, reporter=Reporter())
    assert "--skip-memory-plan" in refused.value.hint
    reporter = Reporter()
    plan = memory_gate(Slot(), short, skip=True, release=4, reporter=reporter)
    assert plan is not None and not plan.fits
    assert read_journal("cpu", limit=1)[-1]["event"] == "memory_plan.skipped"
    assert reporter.warnings and "--skip-memory-plan" in reporter.warnings[0]


def test_nothing_to_plan_from_is_a_warning_not_a_refusal() -> None:
    reporter = Reporter()
    assert memory_gate(Slot(), _profile(), skip=False, release=1, reporter=reporter) is None  # no mem-fraction-static
    assert "mem-fraction-static" in reporter.warnings[0]
    reporter = Reporter()
    plain = load_profile("sim")  # the reference runtime without a checkpoint: silent
    assert memory_gate(Slot(), plain, skip=False, release=1, reporter=reporter) is None
    assert reporter.warnings == []
