"""The inventory and the topology matrix on every stand-in host: what read_inventory makes of
each described host through the stand-in NVML, and what `deploytool gpus` prints of it (the
real console script, pointed at the host by DEPLOYTOOL_NVML_STANDIN)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli

from deploytool.host.gpus import read_inventory
from deploytool.host.nvml_standin import StandInNvml
from deploytool.host.topology import matrix_lines

HOSTS = Path(__file__).resolve().parent / "data" / "nvml-hosts"
CAPTURE = HOSTS / "h200-lent-capture"  # nvml.json and nvidia-smi topo -m as captured on the card
ALL_HOSTS = sorted(p.stem for p in HOSTS.glob("*.yaml"))


def inventory(name: str):
    return read_inventory(StandInNvml.from_file(HOSTS / f"{name}.yaml"))


def labels(inv) -> dict[tuple[int, int], str]:
    return {(p.a, p.b): p.label for p in inv.pairs}


def test_every_host_file_is_read_in_full():
    assert ALL_HOSTS == [
        "b300x8",
        "gb300x4",
        "h200-lent",
        "h200-mig",
        "h200x2-pcie-switch",
        "mixed-5090-pro6000",
        "no-driver",
        "rtx5090x2",
    ]
    for name in (h for h in ALL_HOSTS if h != "no-driver"):  # nvmlInit fails there (test_nvml_standin.py)
        inv = inventory(name)
        n = len(inv.gpus)
        assert inv.error is None and len(inv.pairs) == n * (n - 1) // 2
        assert all(
            g.pci_bus_id and g.numa_node is not None and g.cpu_affinity and g.power_limit_w for g in inv.gpus
        )
        assert all(set(p.p2p) == {"read", "write", "nvlink", "atomics"} and p.level for p in inv.pairs)


def test_the_source_s_two_5090s():
    inv = inventory("rtx5090x2")
    a, b = inv.gpus
    assert (a.power_limit_w, a.pcie_link_gen, a.pcie_link_width) == (600, 5, 16)
    assert (b.power_limit_w, b.pcie_link_gen, b.pcie_link_width, b.pcie_link_width_max) == (575, 4, 4, 4)
    assert b.pcie_link_gen_gpu_max == 5 and b.pcie_text() == "PCIe 4.0 x4 (max 4.0 x4; the card 5.0)"
    assert (a.pcie_now(), b.pcie_now()) == ("PCIe 5.0 x16", "PCIe 4.0 x4")  # what a two-slot compare shows
    assert a.nvlinks is None and a.mig_mode is None  # NVML: not supported on a GeForce card
    pair = inv.pair(0, 1)
    assert (pair.level, pair.label, pair.nvlinks) == ("hostbridge", "PHB", 0)
    assert pair.p2p == {
        "read": "GPU not supported",
        "write": "GPU not supported",
        "nvlink": "not supported",
        "atomics": "GPU not supported",
    }


def test_eight_b300s_in_one_nvswitch_domain_across_two_sockets():
    inv = inventory("b300x8")
    assert [g.numa_node for g in inv.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert all(g.active_nvlinks == 18 and g.nvlinks[0].remote == "switch" for g in inv.gpus)
    assert set(labels(inv).values()) == {"NV18"}
    assert inv.pair(0, 3).level == "node" and inv.pair(3, 4).level == "system" and inv.pair(3, 4).crosses_numa
    assert all(p.p2p["nvlink"] == "ok" for p in inv.pairs)
    assert inv.gpus[0].mig_mode is False  # can do MIG, off


def test_four_gb300s_on_two_grace_cpus():
    inv = inventory("gb300x4")
    assert [g.gpu_numa_id for g in inv.gpus] == [2, 10, 18, 26] and [g.numa_node for g in inv.gpus] == [
        0,
        0,
        1,
        1,
    ]
    assert set(labels(inv).values()) == {"NV18"} and inv.pair(1, 2).level == "system"


def test_two_h200s_on_one_pcie_switch_with_their_links_down():
    inv = inventory("h200x2-pcie-switch")
    assert all(
        len(g.nvlinks) == 18 and g.active_nvlinks == 0 and g.nvlinks[0].version == "4.0" for g in inv.gpus
    )
    pair = inv.pair(0, 1)
    assert (pair.level, pair.label) == ("single", "PIX")
    assert pair.p2p["read"] == "ok" and pair.p2p["nvlink"] == "not supported"


def test_a_5090_beside_an_rtx_pro_6000():
    inv = inventory("mixed-5090-pro6000")
    assert [g.name for g in inv.gpus] == [
        "NVIDIA GeForce RTX 5090",
        "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
    ]
    assert [g.mig_mode for g in inv.gpus] == [None, False] and inv.pair(0, 1).label == "PHB"
    assert inv.pair(0, 1).p2p["read"] == "GPU not supported"  # one GeForce card is enough


def test_a_card_in_mig_mode_lists_its_devices_and_each_is_found_by_uuid():
    inv = inventory("h200-mig")
    card = inv.gpus[0]
    assert card.mig_mode is True and [m.gpu_instance_id for m in card.mig_devices] == [1, 2]
    view = inv.by_uuid(card.mig_devices[1].uuid)
    assert view.mig_parent == card.uuid and view.memory_total_mib == 71424 and view.power_limit_w is None
    assert view.compute_capability == "9.0" and view.label == "GPU0 MIG1"
    assert inv.gpus[1].mig_mode is False and inv.gpus[1].mig_devices == []


def test_the_matrix_is_nvidia_smi_s_with_the_pcie_path_beneath_nvlink():
    lines = matrix_lines(inventory("b300x8"))
    assert lines[0].split()[:9] == ["GPU0", "GPU1", "GPU2", "GPU3", "GPU4", "GPU5", "GPU6", "GPU7", "CPU"]
    assert lines[1].split()[:10] == ["GPU0", "X"] + ["NV18"] * 7 + ["0-55,112-167"]
    beneath = lines[lines.index("PCIe beneath the NVLinks:") + 2]
    assert beneath.split() == ["GPU0", "X", "NODE", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS"]
    assert any(line.startswith("  SYS  = ") for line in lines) and any(
        line.startswith("  NV#") for line in lines
    )


@pytest.mark.parametrize(
    "name, cell",
    [
        ("rtx5090x2", "PHB"),
        ("b300x8", "NV18"),
        ("gb300x4", "NV18"),
        ("h200x2-pcie-switch", "PIX"),
        ("mixed-5090-pro6000", "PHB"),
        ("h200-mig", "PIX"),
    ],
)
def test_gpus_prints_the_matrix_and_json_carries_everything(name, cell):
    env = {"DEPLOYTOOL_NVML_STANDIN": str(HOSTS / f"{name}.yaml")}
    human = run_cli("gpus", env=env)
    assert human.returncode == 0, human.stderr
    row = next(line for line in human.stdout.splitlines() if line.startswith("GPU0 "))
    assert row.split()[1:3] == ["X", cell] and "stand-in NVML over" in human.stdout
    body = json.loads(run_cli("gpus", "--json", env=env).stdout)
    first = body["gpus"][0]
    for key in (
        "pci_bus_id",
        "numa_node",
        "cpu_affinity",
        "pcie_link_gen",
        "pcie_link_gen_max",
        "pcie_link_width",
        "pcie_link_width_max",
        "power_limit_w",
        "nvlinks",
        "mig_mode",
        "mig_devices",
    ):
        assert key in first
    pair = body["pairs"][0]
    assert (pair["a"], pair["b"], pair["label"]) == (0, 1, cell) and set(pair["p2p"]) == {
        "read",
        "write",
        "nvlink",
        "atomics",
    }
    assert body["source"].startswith("stand-in NVML over")


def test_the_lent_h200_host_is_what_nvml_and_nvidia_smi_answered_on_the_card():
    """The described host made from the capture on the lent H200, read back through the
    stand-in, against the raw NVML dump and nvidia-smi topo -m from that card."""
    dump = json.loads((CAPTURE / "nvml.json").read_text())["gpus"][0]
    card = inventory("h200-lent").gpus[0]

    def nvml(call):
        return dump[call]["value"]

    assert card.uuid == nvml("nvmlDeviceGetUUID") and card.name == nvml("nvmlDeviceGetName")
    assert card.pci_bus_id == nvml("nvmlDeviceGetPciInfo")["busId"]
    assert (
        card.pcie_link_gen,
        card.pcie_link_gen_max,
        card.pcie_link_gen_gpu_max,
        card.pcie_link_width,
        card.pcie_link_width_max,
    ) == tuple(
        nvml(c)
        for c in (
            "nvmlDeviceGetCurrPcieLinkGeneration",
            "nvmlDeviceGetMaxPcieLinkGeneration",
            "nvmlDeviceGetGpuMaxPcieLinkGeneration",
            "nvmlDeviceGetCurrPcieLinkWidth",
            "nvmlDeviceGetMaxPcieLinkWidth",
        )
    )
    assert card.power_limit_w * 1000 == nvml("nvmlDeviceGetEnforcedPowerLimit")
    memory = nvml("nvmlDeviceGetMemoryInfo")
    assert (card.memory_total_mib, card.memory_free_mib) == (memory["total"] >> 20, memory["free"] >> 20)
    assert card.memory_bus_width_bits == nvml("nvmlDeviceGetMemoryBusWidth")
    assert card.max_memory_clock_mhz == dump["clock_mem"]["max"]["value"]
    assert [card.mig_mode, card.mig_mode] == [bool(v) for v in nvml("nvmlDeviceGetMigMode")]
    assert all("NotSupported" in link["state"]["error"] for link in dump["nvlink"]) and card.nvlinks is None
    assert "NotSupported" in dump["nvmlDeviceGetNumaNodeId"]["error"] and card.gpu_numa_id is None
    topo = (CAPTURE / "nvidia-smi-topo.txt").read_text().splitlines()
    row = next(line for line in topo if line.startswith("GPU0"))
    assert row.split() == ["GPU0", "X", card.cpu_affinity, str(card.numa_node), "N/A"]
    mine = next(line for line in matrix_lines(inventory("h200-lent")) if line.startswith("GPU0"))
    assert mine.split() == row.split()
