"""A rollout's request, built once: the slots its flags name come from one function (`--cpu`,
each `--cpu-slot`, each `--gpu`, in that order), and `--all-gpus` is planned by the library from
the host's cards, so a library caller gets the slots the command line gets; what --all-gpus
leaves out is said, and its refusals name the request's field (the CLI says the flag)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploytool.cli.flags import flag_message
from deploytool.cli.slot_options import slots_from_options
from deploytool.deploy.rollout_plan import RolloutRequest, card_slots
from deploytool.errors import FieldError
from deploytool.host.card_slots import plan_slots
from deploytool.host.gpus import read_inventory
from deploytool.host.nvml_standin import StandInNvml
from deploytool.host.slots import Slot
from deploytool.profiles import ProfileStore

HOSTS = Path(__file__).resolve().parent / "data" / "nvml-hosts"
PRO = "rtx-pro-6000-qwen3.6-35b-a3b-nvfp4"
A1, A2 = "GPU-5090a001-0000-0000-0000-000000000001", "GPU-5090b002-0000-0000-0000-000000000002"


def slot_plan(profile: str, host: str):
    return plan_slots(
        ProfileStore().get(profile), read_inventory(StandInNvml.from_file(HOSTS / f"{host}.yaml"))
    )


def test_the_slots_the_flags_name_in_the_order_rollout_watch_and_compare_take_them():
    slots = slots_from_options(True, ["b", "a"], [f"{A2},{A1}", A1])
    assert [s.name for s in slots] == ["cpu", "cpu-b", "cpu-a", "gpu-5090a001-5090b002", "gpu-5090a001"]
    assert slots[3] == Slot(gpus=(A1, A2))  # a multi-card slot: its cards in any order
    assert slots_from_options(False, None, None) == []


def test_all_gpus_takes_the_runnable_slots_after_the_named_ones_and_says_what_it_leaves():
    plan = slot_plan(PRO, "mixed-5090-pro6000")  # the 5090 fits only with less memory; the Pro fits
    pro = next(s for s in plan.slots if s.verdict == "runnable")
    request = RolloutRequest(profile_name=PRO, slots=(Slot(cpu_name="a"),), all_gpus=True)
    planned, notes = card_slots(request, plan, serving={"gpu-0ld00000", "cpu-a"})
    assert planned.slots == (Slot(cpu_name="a"), Slot(gpus=tuple(sorted(pro.uuids))))
    # the journal keeps the slots themselves: a --resume runs these, not the cards of that day
    assert not planned.all_gpus and [s["name"] for s in planned.to_json()["slots"]] == ["cpu-a", pro.name]
    assert any("is runnable-with-less-memory, not taken by --all-gpus" in n for n in notes)
    assert any(
        "slot gpu-0ld00000 has a release but is not one of the slots this host's cards make" in n
        for n in notes
    )
    assert card_slots(RolloutRequest(profile_name=PRO), plan, serving=set()) == (RolloutRequest(PRO), [])


@pytest.mark.parametrize(
    "profile, host, message",
    [
        ("sim", "rtx5090x2", "all_gpus: this host's cards make no slot for profile sim"),
        (
            "rtx5090-qwen3.6-35b-a3b-nvfp4",
            "b300x8",
            "all_gpus: this host's cards make no slot for profile rtx5090-qwen3.6-35b-a3b-nvfp4",
        ),
    ],
)
def test_all_gpus_with_no_slot_is_refused_naming_the_field(profile, host, message):
    request = RolloutRequest(profile_name=profile, all_gpus=True)
    with pytest.raises(FieldError) as refused:
        card_slots(request, slot_plan(profile, host), serving=set())
    assert refused.value.field == "all_gpus" and refused.value.message == message
    assert flag_message(refused.value) == "--" + message.replace("all_gpus", "all-gpus", 1)
