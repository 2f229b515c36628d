"""Deploy decisions from hand-made facts, with no Docker: which release a failure brings back,
what is stopped and in which order, when the cache is wiped, what prune removes, what a
restore does, and that every refusal happens in planning, before any step."""

from __future__ import annotations

import pytest
from deploy_facts import SIM, facts, release

from deploytool.deploy.facts import CacheFacts, PortFacts
from deploytool.deploy.plan import UpOptions, plan_prune, plan_rollback, plan_up
from deploytool.deploy.steps import (
    Build,
    CutOver,
    PrepareCache,
    Prune,
    Qualify,
    Start,
    Stop,
    WaitHealthy,
    WriteRelease,
)
from deploytool.errors import DeployError, FieldError, ProfileError, UsageError
from deploytool.host.gpus import GpuInfo, Inventory
from deploytool.host.slots import Slot
from deploytool.profiles import HealthSpec, ProfileStore
from deploytool.release.cache import CacheState, decide


def kinds(steps) -> list[str]:
    return [type(s).__name__ for s in steps]


def test_up_over_a_serving_release_stops_it_after_recording_and_before_starting():
    plan = plan_up(
        facts(release(1), release(2, "running"), current=2, previous=1, next_release=3),
        SIM,
        UpOptions(qualify_suites=["preflight"]),
    )
    assert plan.release == 3 and plan.serving == 2 and plan.fallback == 2
    assert kinds(plan.steps) == [
        "Build",
        "WriteRelease",
        "Stop",
        "PrepareCache",
        "Start",
        "WaitHealthy",
        "Qualify",
        "CutOver",
        "Prune",
    ]
    stop = plan.steps[2]
    assert isinstance(stop, Stop) and stop.release == 2
    cut = next(s for s in plan.steps if isinstance(s, CutOver))
    assert (cut.release, cut.previous, cut.next_release) == (3, 2, 4)
    assert plan.compose["services"]["server"]["image"] == plan.image  # the rendered artifact rides along
    assert plan.record["health"]["start_period"] == SIM.health.start_period


def test_the_release_number_skips_numbers_the_engine_still_has():
    plan = plan_up(facts(release(7), current=7, next_release=3), SIM, UpOptions(skip_qualify=True))
    assert plan.release == 8
    assert "Qualify" not in kinds(plan.steps)
    assert any("--skip-qualify" in w for w in plan.warnings)


def test_restore_stops_the_new_release_and_brings_the_serving_one_back_healthy():
    plan = plan_up(facts(release(1, "running"), current=1, next_release=2), SIM, UpOptions(skip_qualify=True))
    assert kinds(plan.restore) == ["Stop", "PrepareCache", "Start", "WaitHealthy"]
    stop, cache, start, wait = plan.restore
    assert stop.release == 2 and stop.only_if_running
    assert cache.release == 1 and cache.image == "deploytool/sim:old"  # prepared for the old toolchain
    assert start.release == 1 and start.new is False
    assert (
        wait.release == 1 and wait.budget_s == HealthSpec(start_period=7).budget_seconds()
    )  # its own record


def test_the_fallback_is_the_last_cut_over_release_when_nothing_serves():
    plan = plan_up(
        facts(release(1), release(2), current=2, previous=1, next_release=3),
        SIM,
        UpOptions(skip_qualify=True),
    )
    assert plan.serving is None and plan.fallback == 2
    assert "Stop" not in kinds(plan.steps)  # nothing to hand over from
    assert plan.restore[2].release == 2


def test_a_first_up_has_nothing_to_restore_but_its_own_stop():
    plan = plan_up(facts(), SIM, UpOptions(skip_qualify=True))
    assert plan.fallback is None and kinds(plan.restore) == ["Stop"]
    cut = next(s for s in plan.steps if isinstance(s, CutOver))
    assert cut.previous is None


@pytest.mark.parametrize(
    "options, error, text",
    [
        (UpOptions(qualify_suites=["nope"]), UsageError, "nope"),
        (UpOptions(qualify_limit=0), FieldError, "qualify_limit 0"),
        (UpOptions(retention=0), FieldError, "retention 0"),
    ],
)
def test_bad_options_are_refused_in_planning(options: UpOptions, error: type, text: str):
    with pytest.raises(error, match=text):
        plan_up(facts(release(1, "running"), current=1), SIM, options)


def test_bad_qualify_settings_in_the_profile_are_refused_in_planning():
    bad = SIM.model_copy(update={"qualify": {"gsm8k": {"min_acuracy": 0.9}}})
    with pytest.raises(ProfileError):
        plan_up(facts(release(1, "running"), current=1), bad, UpOptions())


def test_a_port_held_by_another_process_is_refused_but_the_serving_release_may_hand_it_over():
    taken = PortFacts("127.0.0.1", 30000, holder="another process")
    with pytest.raises(DeployError, match=r"port 30000 on 127.0.0.1 is already in use by another process"):
        plan_up(facts(release(1, "running"), current=1, port=taken), SIM, UpOptions(skip_qualify=True))
    ours = PortFacts("127.0.0.1", 30000, holder="release 1 of slot cpu", holder_release=("cpu", 1))
    plan = plan_up(facts(release(1, "running"), current=1, port=ours), SIM, UpOptions(skip_qualify=True))
    assert plan.serving == 1
    other_slot = PortFacts("127.0.0.1", 30000, holder="release 4 of slot gpu-x", holder_release=("gpu-x", 4))
    with pytest.raises(DeployError, match="release 4 of slot gpu-x"):
        plan_up(facts(release(1, "running"), current=1, port=other_slot), SIM, UpOptions(skip_qualify=True))
    # what publishes no port (the CPU twin) is planned with every other check, the port's left out
    plan = plan_up(
        facts(release(1, "running"), current=1, port=taken),
        SIM,
        UpOptions(skip_qualify=True, publishes=False),
    )
    assert plan.serving == 1


def test_an_unknown_gpu_is_refused_and_an_unreadable_inventory_only_warns():
    card = Slot(gpus=("GPU-11111111-2222-3333-4444-555555555555",))
    card_profile = ProfileStore().get("rtx5090-qwen3.6-35b-a3b-nvfp4")
    other = GpuInfo(
        0,
        "GPU-99999999-2222-3333-4444-555555555555",
        "NVIDIA GeForce RTX 5090",
        "12.0",
        32607,
        32000,
        575.0,
        5,
        5,
        16,
        16,
    )
    with pytest.raises(UsageError, match="no such GPU"):
        plan_up(
            facts(slot=card, inventory=Inventory(gpus=[other])), card_profile, UpOptions(skip_qualify=True)
        )
    plan = plan_up(
        facts(slot=card, inventory=Inventory(gpus=[], error="NVML is not available")),
        card_profile,
        UpOptions(skip_qualify=True),
    )
    assert any("cannot check the slot's cards" in w for w in plan.warnings)


def test_a_missing_model_folder_is_refused_before_anything_stops():
    missing = facts(release(1, "running"), current=1)
    missing.model_folder_exists = False
    card_model = SIM.model_copy(
        update={"model": SIM.model.model_copy(update={"host_path": "/nonexistent/model"})}
    )
    with pytest.raises(UsageError, match="/nonexistent/model is not a folder"):
        plan_up(missing, card_model, UpOptions(skip_qualify=True))


def test_cache_decision_keeps_wipes_or_creates():
    fp = {"cuda": "13.0", "gpu_arch": "12.0"}
    assert decide(CacheState("v", False, None, 0, 0), fp).action == "created"
    assert decide(CacheState("v", True, dict(fp), 10, 100), fp).action == "kept"
    wiped = decide(CacheState("v", True, {**fp, "cuda": "12.9"}, 10, 100), fp)
    assert wiped.action == "wiped" and wiped.differences == {"cuda": {"stored": "12.9", "new": "13.0"}}
    unknown = decide(CacheState("v", True, None, 3, 100), fp)  # files nobody vouched for
    assert unknown.action == "wiped" and "no fingerprint" in unknown.reason


def test_the_plan_says_when_the_cache_is_wiped_or_decided_after_the_build():
    fp = {"cuda": "none", "gpu_arch": "cpu"}
    stale = CacheFacts(CacheState("v", True, {**fp, "cuda": "12.9"}, 5, 10), fp)
    plan = plan_up(facts(release(1, "running"), current=1, cache=stale), SIM, UpOptions(skip_qualify=True))
    cache = next(s for s in plan.steps if isinstance(s, PrepareCache))
    assert cache.action == "wiped" and "cuda" in cache.reason
    kept = CacheFacts(CacheState("v", True, dict(fp), 5, 10), fp)
    plan = plan_up(facts(release(1, "running"), current=1, cache=kept), SIM, UpOptions(skip_qualify=True))
    assert next(s for s in plan.steps if isinstance(s, PrepareCache)).action == "kept"
    unbuilt = plan_up(
        facts(release(1, "running"), current=1, image_present=False, cache=kept),
        SIM,
        UpOptions(skip_qualify=True),
    )
    assert next(s for s in unbuilt.steps if isinstance(s, Build)).needed
    assert next(s for s in unbuilt.steps if isinstance(s, PrepareCache)).action == "after-build"


def test_prune_after_an_up_keeps_retention_and_never_the_rollback_target():
    # releases 1..4, 4 serving; the up makes 5 and 4 becomes the rollback target
    existing = [release(n) for n in (1, 2, 3)] + [release(4, "running")]
    plan = plan_up(
        facts(*existing, current=4, previous=3, next_release=5),
        SIM,
        UpOptions(skip_qualify=True, retention=2),
    )
    prune = next(s for s in plan.steps if isinstance(s, Prune))
    assert prune.releases == [1, 2]  # keeps 4 (rollback target) and 3 (one more stopped)


def test_standalone_prune_never_removes_what_serves_or_the_rollback_target():
    existing = [release(n) for n in (1, 2, 3, 4)] + [release(5, "running")]
    plan = plan_prune(facts(*existing, current=5, previous=4), retention=2)
    assert kinds(plan.steps) == ["Prune"] and plan.steps[0].releases == [1, 2]
    assert plan_prune(facts(*existing, current=5, previous=4), retention=5).steps[0].releases == []


def test_rollback_stops_the_current_release_and_restores_it_if_the_target_fails():
    plan = plan_rollback(
        facts(release(1), release(2, "running", image="deploytool/sim:new"), current=2, previous=1)
    )
    assert kinds(plan.steps) == ["Stop", "PrepareCache", "Start", "WaitHealthy", "CutOver"]
    assert plan.steps[0].release == 2 and plan.steps[2].release == 1
    cut = plan.steps[-1]
    assert (cut.release, cut.previous, cut.event) == (1, 2, "rollback")  # a second rollback returns
    assert kinds(plan.restore) == ["Stop", "PrepareCache", "Start", "WaitHealthy"]
    assert plan.restore[0].release == 1 and plan.restore[2].release == 2
    assert plan.restore[1].image == "deploytool/sim:new"


@pytest.mark.parametrize(
    "pointers, text",
    [
        ({"current": 2, "previous": None}, "it has no previous release"),
        ({"current": 2, "previous": 9}, "its previous release 9 no longer exists"),
        ({"current": 1, "previous": 2}, "release 2 is already serving"),
    ],
)
def test_rollback_refusals(pointers: dict, text: str):
    with pytest.raises(DeployError, match=text):
        plan_rollback(facts(release(1), release(2, "running"), **pointers))


def test_a_plan_reads_as_steps_and_serialises_as_data():
    plan = plan_up(
        facts(release(1, "running"), current=1), SIM, UpOptions(qualify_suites=["preflight", "contract"])
    )
    text = "\n".join(plan.lines())
    assert "stop release 1" in text and "qualify release 2: preflight, contract" in text
    assert "on failure or Ctrl-C" in text and "start release 1 again" in text
    data = plan.to_json()
    assert [s["step"] for s in data["steps"]][:3] == ["Build", "WriteRelease", "Stop"]
    qualify = next(s for s in data["steps"] if s["step"] == "Qualify")
    assert (
        qualify["suites"] == ["preflight", "contract"]
        and "min_accuracy" not in qualify["settings"]["preflight"]
    )
    assert isinstance(next(s for s in plan.steps if isinstance(s, Qualify)).settings["contract"], dict)
    assert [type(s) for s in plan.steps][:2] == [Build, WriteRelease]
    assert any(isinstance(s, (Start, WaitHealthy)) for s in plan.steps)


def test_an_up_without_port_keeps_the_port_the_slot_serves_on_and_says_so():
    serving = release(1, "running", port=30871)
    plan = plan_up(
        facts(serving, current=1, next_release=2, port=PortFacts("127.0.0.1", 30871)),
        SIM,
        UpOptions(skip_qualify=True),
    )
    assert plan.url == "http://127.0.0.1:30871"
    assert plan.compose["services"]["server"]["ports"][0]["published"] in (30871, "30871")
    text = "\n".join(plan.lines())
    assert "url: http://127.0.0.1:30871" in text and "kept from release 1" in text


def test_port_says_otherwise_and_a_first_up_takes_the_profiles_port():
    moved = plan_up(
        facts(
            release(1, "running", port=30871), current=1, next_release=2, port=PortFacts("127.0.0.1", 30123)
        ),
        SIM,
        UpOptions(skip_qualify=True, host_port=30123),
    )
    assert moved.url == "http://127.0.0.1:30123" and "(port: --port)" in "\n".join(moved.lines())
    first = plan_up(facts(), SIM, UpOptions(skip_qualify=True))
    assert first.url == f"http://127.0.0.1:{SIM.server.port}"
    assert "the profile's default" in "\n".join(first.lines())


def test_a_stopped_slot_keeps_the_port_of_its_last_cut_over_release():
    plan = plan_up(
        facts(release(1, port=30001), release(2, port=30002), current=2, previous=1, next_release=3),
        SIM,
        UpOptions(skip_qualify=True),
    )
    assert plan.url == "http://127.0.0.1:30002"
