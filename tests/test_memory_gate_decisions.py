"""The memory check's decisions without an engine: fits, refuses before any step, skips
(said in the plan, for the executor to journal), or has nothing to judge by and says so.
Facts are made by hand (memory_facts reads the test checkpoints; the card is the profile's)."""

from __future__ import annotations

from pathlib import Path

import pytest
from deploy_facts import facts_with_memory

from deploytool.deploy.plan import UpOptions, plan_up
from deploytool.host.slots import Slot
from deploytool.memory.gate import MemoryRefused, memory_check, memory_facts
from deploytool.profiles import load_profile

MODELS = Path(__file__).parent / "data" / "models"

CPU = Slot()


def _profile(**args):
    profile = load_profile("sim").model_copy(deep=True)
    profile.model.host_path = str(MODELS / "qwen3-30b-a3b")
    profile.match.gpu_name = ["NVIDIA H200"]
    profile.server.args.update(args)
    # the sim's 262,144-token context is past the 40,960 the config derives: SGLang's override
    profile.server.env["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"] = "1"
    return profile


def test_a_plan_that_fits_is_in_the_plan_for_the_executor_to_journal() -> None:
    profile = _profile(**{"mem-fraction-static": 0.85})
    plan = plan_up(facts_with_memory(profile), profile, UpOptions(skip_qualify=True))
    assert plan.memory is not None and plan.memory["verdict"] == "fits" and not plan.memory["skipped"]
    assert plan.memory["card"] == "NVIDIA H200" and plan.memory["pool_tokens"] > 262_144
    assert any(line.startswith("  checked: memory plan on NVIDIA H200") for line in plan.lines())
    assert plan.to_json()["memory"]["verdict"] == "fits"


def test_a_plan_that_does_not_fit_is_refused_in_planning_unless_skipped() -> None:
    short = _profile(**{"mem-fraction-static": 0.5})
    with pytest.raises(MemoryRefused, match="does not fit") as refused:
        plan_up(facts_with_memory(short), short, UpOptions(skip_qualify=True))
    assert "--skip-memory-plan" in refused.value.hint and "nothing was stopped" in refused.value.message
    assert refused.value.summary["verdict"] == "error" and refused.value.summary["problems"]
    plan = plan_up(facts_with_memory(short), short, UpOptions(skip_qualify=True, skip_memory_plan=True))
    assert plan.memory is not None and plan.memory["skipped"] and plan.memory["verdict"] == "error"
    assert any("--skip-memory-plan" in w for w in plan.warnings)


def test_nothing_to_plan_from_is_a_warning_not_a_refusal() -> None:
    unreadable = _profile()  # no mem-fraction-static
    check = memory_check(memory_facts(CPU, unreadable), unreadable, skip=False, slot="cpu")
    assert check.summary is None and "mem-fraction-static" in check.warnings[0]
    plain = load_profile("sim")  # the reference runtime without a checkpoint: silent
    check = memory_check(memory_facts(CPU, plain), plain, skip=False, slot="cpu")
    assert check.summary is None and check.warnings == []
    nameless = _profile(**{"mem-fraction-static": 0.85})
    nameless.match.gpu_name = []  # no card to plan for on the CPU slot
    check = memory_check(memory_facts(CPU, nameless), nameless, skip=False, slot="cpu")
    assert check.summary is None and "no card" in check.warnings[0]


def test_a_fraction_above_the_upper_edge_is_refused_in_planning_with_the_edge() -> None:
    """up (and up --dry-run, which is plan_up) refuses a launch that would die of CUDA
    out-of-memory after allocating its pool, before anything stops, with the highest fraction
    that starts; the journal's summary carries it."""
    greedy = _profile(**{"mem-fraction-static": 0.995})
    # the reference runtime's profile caps its pool (--max-total-tokens): without the cap the
    # pool takes what the fraction gives, as a real launch's does
    greedy.server.args.pop("max-total-tokens", None)
    with pytest.raises(MemoryRefused) as refused:
        plan_up(facts_with_memory(greedy), greedy, UpOptions(skip_qualify=True))
    edge = refused.value.summary["max_mem_fraction_static"]
    assert edge is not None and 0.85 < edge < 0.995
    assert f"the highest mem-fraction-static that starts on this card is {edge:.3f}" in refused.value.message
    assert "nothing was stopped" in refused.value.message
    at_edge = _profile(**{"mem-fraction-static": edge})
    at_edge.server.args.pop("max-total-tokens", None)
    plan = plan_up(facts_with_memory(at_edge), at_edge, UpOptions(skip_qualify=True))
    assert plan.memory is not None and plan.memory["verdict"] in ("fits", "uncalibrated")


def test_a_tensor_parallel_launch_on_one_card_is_refused_in_planning() -> None:
    wide = _profile(**{"mem-fraction-static": 0.85, "tp-size": 2})
    with pytest.raises(MemoryRefused, match="invalid device ordinal"):
        plan_up(facts_with_memory(wide), wide, UpOptions(skip_qualify=True))
