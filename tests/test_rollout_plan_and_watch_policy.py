"""Rollout and watch decisions from hand-made facts, with no Docker: the canary runs the full
qualification and the others the rollout set, each slot keeps its port, waves never take more
than --max-unavailable out, bad requests are refused before anything; and when the supervisor
waits, restarts (with backoff and a cap per hour) or rolls a crash loop back."""

from __future__ import annotations

import pytest
from deploy_facts import SIM, facts, release

from deploytool.cli.slot_options import slot_from_options
from deploytool.deploy.rollout_plan import RolloutRequest, plan_rollout, waves
from deploytool.deploy.steps import Build, Qualify, Stop
from deploytool.deploy.watch_policy import Observation, SlotWatch, decide
from deploytool.errors import FieldError, UsageError
from deploytool.host.slots import Slot, cpu_slot_named
from deploytool.profiles import WatchSpec

A, B, C = Slot(cpu_name="a"), Slot(cpu_name="b"), Slot(cpu_name="c")
G1 = Slot(gpus=("GPU-11111111-0000",))
G12 = Slot(gpus=("GPU-11111111-0000", "GPU-22222222-0000"))


def slot_facts(slot: Slot, port: int, serving: int = 1):
    r = release(serving, "running", port=port)
    r.slot = slot.name
    from deploytool.deploy.facts import PortFacts

    return facts(
        r,
        current=serving,
        next_release=serving + 1,
        slot=slot,
        port=PortFacts("127.0.0.1", port, holder="it", holder_release=(slot.name, serving)),
    )


def options(*slots: Slot, **kw) -> RolloutRequest:
    return RolloutRequest(profile_name="sim", slots=slots, **kw)


def test_named_cpu_slots_are_distinct_slots_with_their_own_names():
    assert cpu_slot_named("a").name == "cpu-a" and Slot().name == "cpu"
    assert slot_from_options(None, False, "b") == Slot(cpu_name="b")
    assert cpu_slot_named("a").project(2).endswith("-cpu-a-r2")
    with pytest.raises(UsageError, match="cpu_slot 'A b'"):
        cpu_slot_named("A b")
    with pytest.raises(UsageError, match="not both"):
        slot_from_options(None, True, "a")


def test_the_canary_runs_the_full_set_and_the_others_the_rollout_set_on_their_own_ports():
    plan = plan_rollout([slot_facts(A, 31001), slot_facts(B, 31002)], SIM, options(A, B), rollout_id="r1")
    assert plan.canary == "cpu-a" and plan.waves == [["cpu-a"], ["cpu-b"]]
    assert isinstance(plan.build, Build)
    assert all(not isinstance(s, Build) for p in plan.slots for s in p.steps)  # built once, first
    canary, other = (next(s for s in p.steps if isinstance(s, Qualify)) for p in plan.slots)
    assert len(canary.suites) > len(other.suites)  # the profile's whole set
    assert other.suites == ["preflight", "contract", "performance"]
    assert other.overrides == {"performance": {"quick": True}} and canary.overrides is None
    assert [p.url for p in plan.slots] == ["http://127.0.0.1:31001", "http://127.0.0.1:31002"]
    assert all(any(isinstance(s, Stop) for s in p.steps) for p in plan.slots)
    quick = plan_rollout(
        [slot_facts(A, 31001), slot_facts(B, 31002)],
        SIM,
        options(A, B, canary_qualify="quick"),
        rollout_id="r1",
    )
    assert next(s for s in quick.slots[0].steps if isinstance(s, Qualify)).suites == other.suites
    text = "\n".join(plan.lines())
    assert "canary: cpu-a" in text and "wave 2: cpu-b" in text and "once, for every slot" in text


def test_waves_take_the_canary_alone_then_max_unavailable_at_a_time():
    assert waves(["a", "b", "c", "d"], 1) == [["a"], ["b"], ["c"], ["d"]]
    assert waves(["a", "b", "c", "d"], 2) == [["a"], ["b", "c"], ["d"]]
    plan = plan_rollout(
        [slot_facts(A, 1), slot_facts(B, 2), slot_facts(C, 3)],
        SIM,
        options(A, B, C),
        rollout_id="r",
        done=["cpu-a"],
    )
    assert [p.slot for p in plan.slots] == ["cpu-b", "cpu-c"] and plan.waves == [["cpu-b"], ["cpu-c"]]
    # a resumed rollout whose canary passed: the rest run the shorter rollout set
    assert next(s for s in plan.slots[0].steps if isinstance(s, Qualify)).suites == [
        "preflight",
        "contract",
        "performance",
    ]


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: ([slot_facts(A, 1), slot_facts(B, 1)], options(A, B)), "same port 1"),
        (lambda: ([slot_facts(A, 1), facts(slot=B)], options(A, B)), "has no release yet"),
        (lambda: ([], options()), "say which slots"),
        (lambda: ([slot_facts(A, 1), slot_facts(A, 2)], options(A, A)), "named twice"),
        (
            lambda: ([slot_facts(G1, 1), slot_facts(G12, 2)], options(G1, G12)),
            "slots gpu-11111111 and gpu-11111111-22222222 share the card GPU-11111111-0000",
        ),
    ],
)
def test_bad_rollouts_are_refused_in_planning(make, message):
    gathered, opts = make()
    with pytest.raises(UsageError, match=message):
        plan_rollout(gathered, SIM, opts, rollout_id="r")


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("max_unavailable", 0, "max_unavailable 0: at least 1 slot is taken out at a time"),
        ("canary_qualify", "all", "canary_qualify 'all': expected full or quick"),
    ],
)
def test_a_bad_request_is_refused_where_it_is_built_naming_its_field(field, value, message):
    with pytest.raises(FieldError) as refused:
        options(A, B, **{field: value})
    assert refused.value.field == field and str(refused.value) == message


def test_every_slot_out_at_once_is_said():
    plan = plan_rollout(
        [slot_facts(A, 1), slot_facts(B, 2)], SIM, options(A, B, max_unavailable=2), rollout_id="r"
    )
    assert any("every slot out of service" in w for w in plan.warnings)


POLICY = WatchSpec(
    interval=1,
    failures=3,
    backoff=10,
    backoff_max=25,
    max_restarts_per_hour=3,
    crash_loop_window=300,
    crash_loop_restarts=3,
)


def seen(
    healthy: bool,
    *,
    release: int = 2,
    engine_restarts: int = 0,
    since: float | None = 1000,
    can_roll_back: bool = True,
) -> Observation:
    return Observation(
        release=release,
        healthy=healthy,
        engine_restarts=engine_restarts,
        since_cutover=since,
        can_roll_back=can_roll_back,
    )


def test_a_release_is_restarted_after_n_consecutive_failures_only():
    state = SlotWatch()
    assert [decide(state, seen(False), POLICY, t).action for t in (0, 1)] == ["wait", "wait"]
    assert decide(state, seen(True), POLICY, 2).action == "ok"  # one success starts the count again
    assert [decide(state, seen(False), POLICY, t).action for t in (3, 4, 5)] == ["wait", "wait", "restart"]


def test_restarts_back_off_doubling_to_the_maximum_and_stop_at_the_hourly_cap():
    state, now, actions = SlotWatch(), 0.0, []
    for _ in range(40):
        actions.append((now, decide(state, seen(False), POLICY, now).action))
        now += 1
    restarts = [t for t, a in actions if a == "restart"]
    # the third failure restarts; then 10 s, then 20 s (doubled) must pass before the next
    assert restarts == [2, 12, 32]
    assert len(restarts) == POLICY.max_restarts_per_hour and actions[-1][1] == "capped"
    assert state.backoff == POLICY.backoff_max  # 40 capped at 25
    later = decide(state, seen(False), POLICY, now + 3600)  # an hour on, the cap frees again
    assert later.action in ("restart", "wait")


def test_a_crash_loop_right_after_cut_over_is_rolled_back_and_not_later():
    state = SlotWatch()
    assert decide(state, seen(False, engine_restarts=1, since=20), POLICY, 0).action == "wait"
    assert decide(state, seen(False, engine_restarts=3, since=25), POLICY, 5).action == "rollback"
    old = SlotWatch()  # the same loop an hour after the cut-over is restarted, not rolled back
    assert decide(old, seen(False, engine_restarts=3, since=3600), POLICY, 0).action == "wait"
    nothing = SlotWatch()  # no previous release to go back to: keep restarting
    actions = [
        decide(nothing, seen(False, engine_restarts=3, since=20, can_roll_back=False), POLICY, t).action
        for t in range(3)
    ]
    assert "rollback" not in actions and actions[-1] == "restart"


def test_watch_restarts_count_toward_the_crash_loop_and_a_new_release_starts_afresh():
    policy = POLICY.model_copy(update={"backoff": 0})
    state, now, actions = SlotWatch(), 0.0, []
    for _ in range(9):  # restart, come back, fail again, right after the cut-over at t=-10
        actions.append(decide(state, seen(False, since=now + 10), policy, now).action)
        now += 1
    assert actions == ["wait", "wait", "restart"] * 2 + ["wait", "wait", "restart"]
    assert decide(state, seen(False, since=now + 10), policy, now).action == "rollback"  # 3 restarts: a loop
    assert decide(state, seen(True, release=3), POLICY, now).action == "ok" and state.restarts == []


def test_only_a_release_an_up_cut_over_counts_as_just_cut_over():
    import time

    from deploytool.deploy.watch import since_cutover
    from deploytool.release.state import journal

    assert since_cutover("cpu-x", 2, time.time()) is None  # never cut over
    journal("cutover", slot="cpu-x", release=2, previous=1)
    assert 0 <= since_cutover("cpu-x", 2, time.time() + 30) - 30 < 5
    journal("rollback", slot="cpu-x", release=1, stopped=2)
    journal("cutover", slot="cpu-x", release=3, previous=1)
    journal(
        "rollback", slot="cpu-x", release=2, stopped=3
    )  # 2 came back by a rollback: never rolled back from
    assert since_cutover("cpu-x", 2, time.time()) is None
    assert since_cutover("cpu-x", 3, time.time()) is not None
