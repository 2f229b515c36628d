"""stop, start and down as pure plans from hand-made facts (no Docker): what each stops,
starts and removes, the drain every stop of a serving release carries, and the refusals of a
slot with nothing to do, before any step."""

from __future__ import annotations

import pytest
from deploy_facts import facts, release

from deploytool.deploy.journal_text import line
from deploytool.deploy.slot_commands import parse_since
from deploytool.deploy.slot_plan import plan_down, plan_start, plan_stop
from deploytool.deploy.steps import CutOver, Remove, RemoveSlot, Stop
from deploytool.errors import DeployError, UsageError
from deploytool.profiles import HealthSpec


def kinds(steps) -> list[str]:
    return [type(s).__name__ for s in steps]


def test_stop_drains_the_serving_release_by_its_record_and_keeps_every_release():
    slot = facts(release(1), release(2, "running"), current=2, previous=1, next_release=3)
    slot.health[2] = HealthSpec(drain_timeout=45)
    plan = plan_stop(slot)
    assert kinds(plan.steps) == ["Stop"] and not any(isinstance(s, Remove) for s in plan.steps)
    stop = plan.steps[0]
    assert isinstance(stop, Stop) and stop.release == 2 and stop.drain_s == 45 and stop.url
    assert plan_stop(slot, drain_timeout=5).steps[0].drain_s == 5  # --drain-timeout wins
    # a stop that fails (Ctrl-C in the drain) leaves the release serving, verified healthy
    assert kinds(plan.restore) == ["PrepareCache", "Start", "WaitHealthy"] and plan.restore[1].release == 2
    with pytest.raises(UsageError, match="drain_timeout -1"):
        plan_stop(slot, drain_timeout=-1)


def test_every_hand_over_drains_the_serving_release_and_a_failed_releases_stop_does_not():
    from deploy_facts import SIM

    from deploytool.deploy.plan import UpOptions, plan_rollback, plan_up

    up = plan_up(
        facts(release(1, "running"), current=1, next_release=2),
        SIM,
        UpOptions(skip_qualify=True, drain_timeout=12),
    )
    assert next(s for s in up.steps if isinstance(s, Stop)).drain_s == 12
    assert up.restore[0].drain_s is None  # the new release that failed is stopped at once
    back = plan_rollback(facts(release(1), release(2, "running"), current=2, previous=1))
    assert back.steps[0].drain_s == 30  # no --drain-timeout: the release's recorded health (default 30)


def test_nothing_to_stop_or_to_start_is_refused_in_planning():
    with pytest.raises(
        DeployError, match="has nothing to stop: no release of it runs \\(releases kept: 1, 2\\)"
    ):
        plan_stop(facts(release(1), release(2), current=2, previous=1))
    with pytest.raises(DeployError, match="already serves on slot cpu"):
        plan_start(facts(release(1, "running"), current=1))
    with pytest.raises(DeployError, match="has no release to start"):
        plan_start(facts())


def test_start_brings_the_current_release_back_and_cuts_over_to_it():
    plan = plan_start(facts(release(1), release(2), current=1, previous=None, next_release=3))
    assert kinds(plan.steps) == ["PrepareCache", "Start", "WaitHealthy", "CutOver"] and plan.release == 1
    cut = plan.steps[-1]
    assert isinstance(cut, CutOver) and (cut.release, cut.next_release) == (1, 3)
    assert kinds(plan.restore) == ["Stop"] and plan.restore[0].only_if_running
    # no pointer (deploytool died in its first up): nothing is chosen for the person, who names one
    with pytest.raises(DeployError, match="no current release in this state folder") as refused:
        plan_start(facts(release(1), release(4), current=None, next_release=5))
    assert "`deploytool start --cpu --release N`" in (refused.value.hint or "")
    named = plan_start(facts(release(1), release(4), current=None, next_release=5), 4)
    assert named.release == 4 and named.in_place_of is None


def test_start_never_brings_back_another_release_unasked():
    gone = facts(
        release(2), current=1, previous=2, next_release=3
    )  # 1 was rolled back to; its container is gone
    with pytest.raises(DeployError, match="current release 1 is not on this engine") as refused:
        plan_start(gone)
    hint = refused.value.hint or ""
    assert "`deploytool up --cpu --profile NAME`" in hint
    assert "`deploytool rollback --cpu` starts the rollback target, release 2" in hint
    assert "`deploytool start --cpu --release N` starts a kept release (N: 2)" in hint
    plan = plan_start(gone, 2)  # asked for: said, and recorded as current in place of 1
    assert (
        plan.in_place_of == 1
        and "starts release 2 in place of the slot's current release 1" in plan.lines()[1]
    )
    cut = plan.steps[-1]
    assert isinstance(cut, CutOver) and (cut.release, cut.previous) == (2, None)
    kept = plan_start(
        facts(release(1), release(2), current=1, previous=2), 2
    )  # 1 still there: the rollback target
    assert (kept.steps[-1].release, kept.steps[-1].previous, kept.in_place_of) == (2, 1, 1)
    with pytest.raises(DeployError, match="release 7 of slot cpu is not on this engine \\(kept: 1, 2\\)"):
        plan_start(facts(release(1), release(2), current=1), 7)


def test_down_says_every_release_and_keeps_the_volume_and_state_unless_asked():
    slot = facts(release(1), release(2, "running"), current=2, previous=1)
    plan = plan_down(slot, networks=["n1"], volume=None, state=None)
    assert kinds(plan.steps) == ["Stop", "Remove", "Remove", "RemoveSlot"]
    assert [s.release for s in plan.steps if isinstance(s, Remove)] == [1, 2] and plan.steps[0].drain_s == 30
    last = plan.steps[-1]
    assert isinstance(last, RemoveSlot) and "keep the JIT cache volume" in last.describe()
    everything = plan_down(slot, networks=[], volume="v", state="/s").steps[-1]
    assert "remove JIT cache volume v" in everything.describe() and "remove state /s" in everything.describe()
    with pytest.raises(DeployError, match="has nothing to remove"):
        plan_down(facts(), networks=[], volume=None, state=None)
    # leftovers alone (a network, a volume) are still something to remove
    assert kinds(plan_down(facts(), networks=["n1"], volume=None, state=None).steps) == ["RemoveSlot"]


def test_since_takes_a_duration_or_a_time():
    assert parse_since("10m", now=1000.0) == 400.0 and parse_since("2h", now=10_000.0) == 2_800.0
    assert parse_since("2026-01-01T00:00:00Z") == 1767225600.0 and parse_since(None) is None
    with pytest.raises(UsageError, match="since 'yesterday'"):
        parse_since("yesterday")


def test_the_journal_reads_a_drain_in_words():
    entry = {
        "event": "release.drained",
        "slot": "cpu",
        "release": 2,
        "timeout_s": 1.0,
        "waited_s": 1.0,
        "at_start": 3,
        "left": 2,
        "why": None,
        "drained": False,
    }
    assert "2 request(s) still running or queued at the drain timeout of 1 s (of 3): cut by the stop" in line(
        entry
    )


def test_a_release_of_another_state_folder_is_taken_over_only_when_asked():
    from deploy_facts import SIM

    from deploytool.deploy.plan import UpOptions, plan_rollback, plan_up

    theirs = facts(release(1), release(2, "running"), current=1, previous=None, next_release=2)
    theirs.recorded, theirs.state_folder = (
        frozenset({1}),
        "/home/b/.local/state/deploytool",
    )  # 2: not made here
    plans = {
        "stop": lambda t: plan_stop(theirs, take_over=t),
        "down": lambda t: plan_down(theirs, networks=[], volume=None, state=None, take_over=t),
        "up": lambda t: plan_up(theirs, SIM, UpOptions(skip_qualify=True, take_over=t)),
        "rollback": lambda t: plan_rollback(theirs, take_over=t),
    }
    for action, plan in plans.items():
        with pytest.raises(
            DeployError, match="release 2 \\(serving\\) of slot cpu was started from another state folder"
        ) as refused:
            plan(False)
        said = refused.value.message
        assert (
            "(/home/b/.local/state/deploytool, DEPLOYTOOL_INSTANCE=" in said and f"`{action}` would" in said
        )
        assert all(
            word in (refused.value.hint or "")
            for word in ("DEPLOYTOOL_INSTANCE", "DEPLOYTOOL_HOME", "--take-over")
        )
        if action != "rollback":  # no rollback target here: refused for that, once asked to take over
            assert plan(True).steps
    # a stopped release of theirs: start refuses it by number, down because it would remove it
    stopped = facts(release(1), release(2), current=1, next_release=3)
    stopped.recorded = frozenset({1})
    with pytest.raises(DeployError, match="release 2 of slot cpu was started from another state folder"):
        plan_start(stopped, 2)
    assert plan_start(stopped).release == 1  # its own current release starts as ever
    with pytest.raises(DeployError, match="`down` would remove it"):
        plan_down(stopped, networks=[], volume=None, state=None)
