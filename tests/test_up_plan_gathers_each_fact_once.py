"""An up's plan is made from facts gathered once: the image's build plan (hashing the recipe's
inputs) is derived while gathering and reused by the planner, and the no-engine case is its own
type, not an attribute looked up by name."""

from __future__ import annotations

import pytest

from deploytool.deploy import plan as plan_module
from deploytool.deploy.facts import gather_facts
from deploytool.deploy.no_engine import NoEngine
from deploytool.deploy.plan import UpOptions, plan_up
from deploytool.profiles import ProfileStore
from deploytool.release.slots import Slot


def test_the_planner_reuses_the_build_plan_the_facts_gathered(monkeypatch: pytest.MonkeyPatch) -> None:
    profile = ProfileStore().get("sim")
    facts = gather_facts(NoEngine("no engine in this test"), Slot(), profile, host_port=None, bind="127.0.0.1",
                         publishes=False)
    assert facts.engine_absent == "no engine in this test"
    assert facts.image is not None and facts.image.build is not None

    def again(*args, **kwargs):
        raise AssertionError("plan_build ran a second time for the same up")

    monkeypatch.setattr(plan_module, "plan_build", again)
    planned = plan_up(facts, profile, UpOptions(profile_name="sim", host_port=39123))
    assert planned.steps[0].image == facts.image.reference  # the Build step names the gathered tag


def test_a_different_wheelhouse_is_planned_afresh(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the gathered plan was for the image without a wheelhouse: the up with one plans its own
    profile = ProfileStore().get("sim")
    facts = gather_facts(NoEngine("none"), Slot(), profile, host_port=None, bind="127.0.0.1", publishes=False)
    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    calls = []
    real = plan_module.plan_build
    monkeypatch.setattr(plan_module, "plan_build", lambda p, **kw: calls.append(kw) or real(p, **kw))
    plan_up(facts, profile, UpOptions(profile_name="sim", host_port=39124, wheelhouse=wheelhouse))
    assert calls == [{"wheelhouse": wheelhouse}]
