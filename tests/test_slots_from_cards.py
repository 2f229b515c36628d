"""Slots from cards on every stand-in host: one slot per card (or MIG device) for a one-card
profile, closest-connected groups for tensor parallelism, NUMA-straddling groups refused and
said so, every failed requirement listed, and no card counted twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import run_cli

from deploytool.host.card_slots import plan_slots
from deploytool.host.fit import classify
from deploytool.host.gpus import read_inventory
from deploytool.host.nvml_standin import StandInNvml
from deploytool.profiles import ProfileStore

HOSTS = Path(__file__).resolve().parent / "data" / "nvml-hosts"
H200, RTX, PRO = (
    "h200-qwen3.6-35b-a3b-fp8",
    "rtx5090-qwen3.6-35b-a3b-nvfp4",
    "rtx-pro-6000-qwen3.6-35b-a3b-nvfp4",
)
TP8, TP4 = "b300x8-glm5.2-nvfp4-tp8", "gb300x4-glm5.2-nvfp4-tp4"


@pytest.fixture(scope="module")
def store() -> ProfileStore:
    return ProfileStore()


def inventory(name: str, path: Path | None = None):
    return read_inventory(StandInNvml.from_file(path or HOSTS / f"{name}.yaml"))


def tp2_store(tmp_path: Path) -> ProfileStore:
    """The H200 profile over two cards (tensor parallel 2)."""
    (tmp_path / "profiles").mkdir(exist_ok=True)
    (tmp_path / "profiles" / "h200-tp2.yaml").write_text(
        f"name: h200-tp2\nextends: {H200}\nmatch: {{gpu_count: 2}}\nserver: {{args: {{tp-size: 2}}}}\n"
    )
    return ProfileStore([tmp_path / "profiles"])


def described(tmp_path: Path, name: str, change) -> Path:
    """A variant of a stand-in host, written for one test."""
    host = yaml.safe_load((HOSTS / f"{name}.yaml").read_text())
    change(host)
    path = tmp_path / f"{name}-variant.yaml"
    path.write_text(yaml.safe_dump(host))
    return path


@pytest.mark.parametrize(
    "host, profile, expected",
    [
        ("rtx5090x2", RTX, [["GPU0"], ["GPU1"]]),
        ("mixed-5090-pro6000", RTX, [["GPU0"], ["GPU1"]]),
        ("mixed-5090-pro6000", PRO, [["GPU0"], ["GPU1"]]),
        ("h200x2-pcie-switch", H200, [["GPU0"], ["GPU1"]]),
        ("h200-mig", H200, [["GPU0 MIG0"], ["GPU0 MIG1"], ["GPU1"]]),
        ("b300x8", TP8, [[f"GPU{i}" for i in range(8)]]),
        ("gb300x4", TP4, [["GPU0", "GPU1", "GPU2", "GPU3"]]),
        ("b300x8", H200, []),
        ("rtx5090x2", TP8, []),
    ],
)
def test_slots_offered_per_profile_on_every_host(store, host, profile, expected):
    plan = plan_slots(store.get(profile), inventory(host))
    assert [s.cards for s in plan.slots] == expected
    assert len({s.name for s in plan.slots}) == len(plan.slots)  # a card, a slot: never one name twice
    cards = [c for s in plan.slots for c in s.cards]
    assert len(cards) == len(set(cards))  # no card in two slots
    if not expected:
        assert plan.unused and all("compute capability" in u["why"] for u in plan.unused)


def test_a_one_card_profile_on_two_cards_gets_a_slot_per_card_with_its_own_verdict(store):
    plan = plan_slots(store.get(PRO), inventory("mixed-5090-pro6000"))
    five, pro = plan.slots
    assert (five.verdict, pro.verdict) == ("runnable-with-less-memory", "runnable")
    assert any("32 GiB, the profile wants 94 GiB" in r for r in five.reasons)
    assert five.gpu_flags == "--gpu GPU-5090c003-1b2c-4d3e-8f40-5a6b7c8d9e0f"


def test_tensor_parallel_groups_over_nvlink_may_span_numa_nodes_and_say_so(store):
    slot = plan_slots(store.get(TP8), inventory("b300x8")).slots[0]
    assert slot.link == "NV18" and slot.numa_nodes == [0, 1] and slot.verdict == "runnable"
    assert any("spans NUMA nodes 0 and 1" in note for note in slot.notes)


def test_a_group_that_would_cross_numa_nodes_without_nvlink_is_refused(tmp_path):
    def split(host):  # the second card on the other socket, under its own host bridge
        host["gpus"][1].update(numa_node=1, pcie_path=["root-1"])

    plan = plan_slots(
        tp2_store(tmp_path).get("h200-tp2"), inventory("", described(tmp_path, "h200x2-pcie-switch", split))
    )
    assert plan.slots == [] and len(plan.refused) == 1
    refused = plan.refused[0]
    assert refused.cards == ["GPU0", "GPU1"]
    assert "NUMA nodes 0 and 1 with no NVLink between them (SYS)" in refused.reasons[0]
    assert {u["card"].split()[0] for u in plan.unused} == {"GPU0", "GPU1"}


def test_the_same_switch_is_preferred_over_card_order(tmp_path):
    def four_cards(host):  # GPU0 and GPU2 behind one switch, GPU1 and GPU3 behind another
        base = host["gpus"][0]
        host["gpus"] = []
        for i, switch in enumerate(["switch-a", "switch-b", "switch-a", "switch-b"]):
            host["gpus"].append(
                {
                    **base,
                    "uuid": f"GPU-c000000{i}-4b3a-4c2d-9e1f-00000000000{i}",
                    "pci_bus_id": f"00000000:{0x3A + i:02X}:00.0",
                    "pcie_path": ["root-0", switch],
                }
            )

    plan = plan_slots(
        tp2_store(tmp_path).get("h200-tp2"),
        inventory("", described(tmp_path, "h200x2-pcie-switch", four_cards)),
    )
    assert [s.cards for s in plan.slots] == [["GPU0", "GPU2"], ["GPU1", "GPU3"]]
    assert [s.link for s in plan.slots] == ["PIX", "PIX"]


def test_a_group_without_peer_to_peer_is_offered_with_a_note(tmp_path):
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "r2.yaml").write_text(f"name: r2\nextends: {RTX}\nmatch: {{gpu_count: 2}}\n")
    slot = plan_slots(ProfileStore([tmp_path / "profiles"]).get("r2"), inventory("rtx5090x2")).slots[0]
    assert slot.link == "PHB" and any(
        "no peer-to-peer between GPU0 and GPU1 (GPU not supported)" in n for n in slot.notes
    )


def test_a_mig_card_takes_no_part_in_tensor_parallelism(tmp_path):
    plan = plan_slots(tp2_store(tmp_path).get("h200-tp2"), inventory("h200-mig"))
    assert plan.slots == []
    assert any(
        u["card"].startswith("GPU0 ") and "tensor parallelism does not span MIG devices" in u["why"]
        for u in plan.unused
    )


def test_every_failed_requirement_is_listed(store):
    h200s = inventory("h200x2-pcie-switch").gpus
    fit = classify(store.get(TP8), h200s)
    assert fit.verdict == "incompatible"
    assert fit.reasons[0] == "needs 8 GPUs, the slot has 2"
    assert any(
        "compute capability 9.0, the profile's kernels need 10.3 (GPU0, GPU1)" in r for r in fit.reasons
    )
    assert any("140 GiB, the profile wants 260 GiB" in r for r in fit.reasons)
    mig = inventory("h200-mig").gpus
    whole = classify(store.get(H200), mig[:1])
    assert whole.verdict == "incompatible" and "in MIG mode" in whole.reasons[0]


def test_a_host_that_makes_no_slot_says_everything_it_lacks(store):
    """Two cards of another architecture for a four-card profile: the count, and for each card its
    compute capability and its memory, in the slot plan and in profiles list."""
    plan = plan_slots(store.get(TP4), inventory("mixed-5090-pro6000"))
    assert plan.slots == [] and plan.note == "a slot needs 4 GPUs; this host has 2"
    assert len(plan.unused) == 2
    for card in plan.unused:
        assert "compute capability 12.0, the profile's kernels need 10.3" in card["why"]
        assert "the profile wants 260 GiB" in card["why"]
    env = {"DEPLOYTOOL_NVML_STANDIN": str(HOSTS / "mixed-5090-pro6000.yaml")}
    local = json.loads(run_cli("profiles", "list", "--local-gpus", "--json", env=env).stdout)
    gb300 = next(p for p in local["profiles"] if p["profile"] == TP4)
    assert (
        gb300["verdict"] == "incompatible" and gb300["reasons"][0] == "a slot needs 4 GPUs; this host has 2"
    )


def test_profiles_list_local_gpus_offers_the_slots_and_counts_no_card_twice():
    env = {"DEPLOYTOOL_NVML_STANDIN": str(HOSTS / "h200x2-pcie-switch.yaml")}
    local = json.loads(run_cli("profiles", "list", "--local-gpus", "--json", env=env).stdout)
    h200 = next(p for p in local["profiles"] if p["profile"] == H200)
    assert h200["verdict"] == "runnable" and [s["cards"] for s in h200["slots"]] == [["GPU0"], ["GPU1"]]
    assert not any("uses 1 of the slot's 2 GPUs" in r for r in h200["reasons"])
    first, second = local["gpus"]
    both = run_cli("profiles", "list", "--local-gpus", "--gpu", first, "--json", env=env)
    assert both.returncode == 2 and json.loads(both.stdout)["error"]["kind"] == "UsageError"
    twice = run_cli("profiles", "list", "--gpu", first, "--gpu", first, "--json", env=env)
    assert twice.returncode == 2 and "twice" in json.loads(twice.stdout)["error"]["message"]
    pair = json.loads(run_cli("profiles", "list", "--gpu", first, "--gpu", second, "--json", env=env).stdout)
    assert pair["gpus"] == [first, second]
    fit = next(p for p in pair["profiles"] if p["profile"] == H200)
    assert "uses 1 of the slot's 2 GPUs" in fit["reasons"]


def test_slots_command_prints_the_plan_and_says_no_with_exit_1():
    env = {"DEPLOYTOOL_NVML_STANDIN": str(HOSTS / "b300x8.yaml")}
    out = run_cli("slots", "--profile", TP8, env=env)
    assert out.returncode == 0, out.stderr
    assert "slot 1: gpu-b3000000-b3000001-" in out.stdout and "GPU0 + GPU1 + GPU2 + GPU3 + GPU4" in out.stdout
    assert "--gpu GPU-b3000007-7e1a-4c2b-9d3e-000000000007" in out.stdout
    none = run_cli("slots", "--profile", H200, "--json", env=env)
    assert none.returncode == 1 and json.loads(none.stdout)["slots"] == []


def test_a_card_left_over_is_said_so(tmp_path):
    def three_cards(host):
        base = host["gpus"][0]
        host["gpus"] = [
            {
                **base,
                "uuid": f"GPU-d000000{i}-4b3a-4c2d-9e1f-00000000000{i}",
                "pci_bus_id": f"00000000:{0x3A + i:02X}:00.0",
            }
            for i in range(3)
        ]

    plan = plan_slots(
        tp2_store(tmp_path).get("h200-tp2"),
        inventory("", described(tmp_path, "h200x2-pcie-switch", three_cards)),
    )
    assert [s.cards for s in plan.slots] == [["GPU0", "GPU1"]] and plan.refused == []
    assert plan.unused == [
        {
            "card": "GPU2 (NVIDIA H200 NVL)",
            "uuid": "GPU-d0000002-4b3a-4c2d-9e1f-000000000002",
            "why": "left over: 3 usable card(s) make 1 slot(s) of 2",
        }
    ]


def test_profiles_list_local_gpus_gives_each_slot_the_memory_plans_verdict(tmp_path: Path):
    """The verdict `up` would reach on each slot: both edges of the memory plan on that slot's
    cards; a fraction above the upper edge is an error there, with the edge."""
    env = {"DEPLOYTOOL_NVML_STANDIN": str(HOSTS / "h200x2-pcie-switch.yaml")}
    local = json.loads(run_cli("profiles", "list", "--local-gpus", "--json", env=env).stdout)
    h200 = next(p for p in local["profiles"] if p["profile"] == H200)
    assert [m["verdict"] for m in h200["memory"]] == ["fits", "fits"]
    edge = h200["memory"][0]["max_mem_fraction_static"]
    assert 0.9 < edge < 1
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "h200-greedy.yaml").write_text(
        f"name: h200-greedy\nextends: {H200}\nserver: {{args: {{mem-fraction-static: 0.99}}}}\n"
    )
    local = json.loads(
        run_cli(
            "profiles",
            "list",
            "--local-gpus",
            "--json",
            "--profiles-dir",
            str(tmp_path / "profiles"),
            env=env,
        ).stdout
    )
    greedy = next(p for p in local["profiles"] if p["profile"] == "h200-greedy")
    assert [m["verdict"] for m in greedy["memory"]] == ["error", "error"]
    assert any(
        f"the highest mem-fraction-static that starts on this card is {edge:.3f}" in x
        for x in greedy["memory"][0]["problems"]
    )
