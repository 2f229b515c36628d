"""A tune candidate's plans, from hand-made facts: its own action, steps and restore, made by the
same checks and the same step builders as `up`'s release, never by editing `up`'s plan."""

from __future__ import annotations

import dataclasses

import pytest
from deploy_facts import CPU, SIM, facts, release

from deploytool.deploy import plan as deploy_plan
from deploytool.deploy.candidate_plan import (
    plan_candidate,
    plan_candidate_stop,
    plan_pause_serving,
    plan_search_end,
)
from deploytool.deploy.facts import PortFacts
from deploytool.deploy.plan import UpOptions, plan_up
from deploytool.deploy.steps import Build, PrepareCache, Start, Stop, WaitHealthy, WriteRelease
from deploytool.errors import DeployError

CANDIDATE_STEPS = [Build, WriteRelease, PrepareCache, Start, WaitHealthy]


def test_a_candidate_launches_its_own_release_and_a_failed_start_only_stops_it():
    # what the slot looks like once tune stopped its serving release 2
    history = facts(
        release(1), release(2), current=2, previous=1, next_release=3, port=PortFacts("127.0.0.1", 41234)
    )
    plan = plan_candidate(history, SIM, host_port=41234)
    assert plan.action == "tune"
    assert [type(s) for s in plan.steps] == CANDIDATE_STEPS
    assert all(s.release == 3 for s in plan.steps[1:])
    assert [type(s) for s in plan.restore] == [Stop]
    stop = plan.restore[0]
    assert (stop.release, stop.container, stop.only_if_running) == (3, f"{CPU.project(3)}-server", True)
    assert plan.fallback is None  # nothing is brought back by a candidate: the search's end does that
    assert plan.url == "http://127.0.0.1:41234"
    start = plan.steps[3]
    assert start.new and start.port == 41234 and start.bind == "127.0.0.1"
    # the same release `up` would make from the same facts: its number, image, compose document and record
    up = plan_up(history, SIM, UpOptions(host_port=41234, skip_qualify=True))
    assert (plan.release, plan.image, plan.compose, plan.record) == (
        up.release,
        up.image,
        up.compose,
        up.record,
    )
    assert [s for s in up.steps if type(s) in CANDIDATE_STEPS] == plan.steps


def test_the_candidate_plan_is_not_up_s_plan_edited(monkeypatch):
    """Whatever plan_up comes to run (another step, another order), a candidate runs its own list."""

    def changed_up(*args, **kwargs):
        raise AssertionError("a candidate is planned without plan_up")

    monkeypatch.setattr(deploy_plan, "plan_up", changed_up)
    plan = plan_candidate(facts(release(1), current=1, next_release=2), SIM, host_port=41235)
    assert [type(s) for s in plan.steps] == CANDIDATE_STEPS
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.action = "up"  # type: ignore[misc]  # a plan is never edited after it is made


def test_a_candidate_is_refused_by_up_s_checks_before_any_step():
    taken = PortFacts("127.0.0.1", 41236, holder="another process")
    with pytest.raises(DeployError, match="already in use by another process"):
        plan_candidate(facts(port=taken), SIM, host_port=41236)


def test_the_search_stops_what_serves_once_and_brings_it_back_at_its_end():
    assert plan_pause_serving(facts(release(1), current=1, next_release=2)) is None  # nothing serves
    serving = release(2, "running")
    pause = plan_pause_serving(facts(release(1), serving, current=2, previous=1, next_release=3))
    assert pause is not None and pause.action == "tune"
    assert [(type(s), s.release) for s in pause.steps] == [(Stop, 2)]
    assert [type(s).__name__ for s in pause.restore] == [
        "PrepareCache",
        "Start",
        "WaitHealthy",
    ]  # a failed stop
    end = plan_search_end(
        facts(release(1), release(2), release(3), release(4), current=2, next_release=5), [3, 4], serving
    )
    assert [type(s).__name__ for s in end.steps] == [
        "Stop",
        "Stop",
        "Prune",
        "PrepareCache",
        "Start",
        "WaitHealthy",
    ]
    assert end.steps[2].releases == [3, 4] and end.steps[2].retention == 0
    assert end.steps[4].release == 2 and not end.steps[4].new
    stop = plan_candidate_stop(CPU, 3)
    assert stop.action == "tune" and [(type(s), s.release, s.only_if_running) for s in stop.steps] == [
        (Stop, 3, True)
    ]
