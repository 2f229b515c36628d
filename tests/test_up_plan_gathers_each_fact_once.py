"""An up's plan is made from facts gathered once: the image's build plan (hashing the recipe's
inputs, resolving a fork's checkout) is derived while gathering and reused by the planner, the
slot's releases are read from the engine once, and the no-engine case is its own type, not an
attribute looked up by name. (The weights: test_up_checks_the_weights_once.py.)"""

from __future__ import annotations

from typing import ClassVar

import pytest

from deploytool.deploy import plan as plan_module
from deploytool.deploy.facts import gather_facts
from deploytool.deploy.no_engine import NoEngine
from deploytool.deploy.plan import UpOptions, plan_up
from deploytool.errors import DeployError
from deploytool.host.slots import Slot
from deploytool.image import build as build_module
from deploytool.profiles import ProfileStore


def test_the_planner_reuses_the_build_plan_the_facts_gathered(monkeypatch: pytest.MonkeyPatch) -> None:
    profile = ProfileStore().get("sim")
    facts = gather_facts(
        NoEngine("no engine in this test"), Slot(), profile, host_port=None, bind="127.0.0.1", publishes=False
    )
    assert facts.engine_absent == "no engine in this test"
    assert facts.image is not None and facts.image.build is not None

    def again(*args, **kwargs):
        raise AssertionError("plan_build ran a second time for the same up")

    # planning reads no file of its own: the recipe's inputs are hashed once, with the facts
    monkeypatch.setattr(build_module, "plan_build", again)
    assert not hasattr(plan_module, "plan_build")
    planned = plan_up(facts, profile, UpOptions(profile_name="sim", host_port=39123))
    assert planned.steps[0].image == facts.image.reference  # the Build step names the gathered tag


def test_a_wheelhouse_is_planned_with_the_facts_gathered_for_it(tmp_path) -> None:
    # the build plan is gathered for the image the up asks for: one with a wheelhouse is another
    # image, and facts gathered without it cannot plan it
    profile = ProfileStore().get("sim")
    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    without = gather_facts(
        NoEngine("none"), Slot(), profile, host_port=None, bind="127.0.0.1", publishes=False
    )
    with pytest.raises(DeployError, match="no build plan for this image"):
        plan_up(without, profile, UpOptions(profile_name="sim", host_port=39124, wheelhouse=wheelhouse))
    facts = gather_facts(
        NoEngine("none"),
        Slot(),
        profile,
        host_port=None,
        bind="127.0.0.1",
        wheelhouse=wheelhouse,
        publishes=False,
    )
    planned = plan_up(facts, profile, UpOptions(profile_name="sim", host_port=39124, wheelhouse=wheelhouse))
    assert facts.image is not None and without.image is not None
    assert planned.steps[0].image == facts.image.reference != without.image.reference


def test_the_runtime_source_resolved_for_the_build_plan_is_what_the_plan_says(tmp_path, monkeypatch) -> None:
    # a fork's checkout is resolved (its commit found, its tree checked) while the facts are
    # gathered; the plan's notes on the runtime come from that, not from resolving it again
    from pathlib import Path

    from fork_repo import profile_yaml, tiny_repo

    from deploytool.image import local_wheels, runtime_source

    repo, commit = tiny_repo(tmp_path)
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "fork.yaml").write_text(
        profile_yaml("fork", {"kind": "git", "repo": str(repo), "commit": commit})
    )
    profile = ProfileStore([Path(__file__).parent / "profiles_sglang", tmp_path / "profiles"]).get("fork")
    facts = gather_facts(NoEngine("none"), Slot(), profile, host_port=None, bind="127.0.0.1", publishes=False)

    def again(*args, **kwargs):
        raise AssertionError("the runtime source was resolved again while planning")

    monkeypatch.setattr(runtime_source, "resolve", again)
    monkeypatch.setattr(local_wheels, "resolve", again)
    planned = plan_up(
        facts,
        profile,
        UpOptions(
            profile_name="fork",
            host_port=39126,
            skip_qualify=True,
            publishes=False,
            dry_run=True,
            skip_memory_plan=True,
        ),
    )
    assert f"runtime: sglang 0.5.23 from git {repo} at commit {commit} (python/)" in planned.inputs


def test_an_up_reads_the_slot_s_releases_once() -> None:
    # the slot's releases choose the profile (the serving one's, when none is named) and are the
    # facts the plan is made from: one read of the engine serves both
    from deploytool.deploy.commands import plan_for_up

    class Counting(NoEngine):
        asked: ClassVar[list[str | None]] = []

        def releases(self, slot: str | None = None) -> list:
            self.asked.append(slot)
            return super().releases(slot)

    engine = Counting("counting")
    plan = plan_for_up(
        Slot(),
        UpOptions(profile_name="sim", host_port=39127, skip_qualify=True, publishes=False, dry_run=True),
        engine=engine,
    )
    assert plan.profile == "sim" and engine.asked == ["cpu"]
