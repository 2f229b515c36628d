"""GPU inventory and profile fit. NVML itself needs an NVIDIA driver, which this machine lacks:
the reading code is exercised through a stand-in with NVML's call names and return shapes,
and `deploytool gpus` is tested for its no-driver behaviour (its real output on an H200 is in
docs/gpus.md)."""

from __future__ import annotations

import json

from conftest import run_cli
from fake_nvml import FakeNvml

from deploytool.host.fit import annotate_matches, classify
from deploytool.host.gpus import GpuInfo, Inventory, read_inventory
from deploytool.profiles import Profile, ProfileStore


def test_inventory_reads_every_field_and_tolerates_unsupported():
    inv = read_inventory(FakeNvml())
    assert inv.error is None and inv.driver_version == "580.95.05" and inv.cuda_driver_version == "13.0"
    h200, rtx = inv.gpus
    assert h200.name == "NVIDIA H200" and h200.compute_capability == "9.0" and h200.power_limit_w == 700
    assert h200.memory_total_mib == 143771 and h200.pcie_link_gen == 5 and h200.pcie_link_width == 16
    assert h200.pcie_link_width_max is None  # NotSupported is an absent reading, not an error
    assert rtx.compute_capability == "12.0" and inv.by_uuid(rtx.uuid) is rtx


def test_no_driver_is_an_inventory_with_an_error():
    class Broken(FakeNvml):
        def nvmlInit(self):
            raise RuntimeError("NVML Shared Library Not Found")

    inv = read_inventory(Broken())
    assert inv.gpus == [] and "NVML Shared Library Not Found" in inv.error


def card(name: str, cc: str, gib: float) -> GpuInfo:
    return GpuInfo(0, "GPU-x", name, cc, int(gib * 1024), None, None, None, None, None, None)


def gpu_profile(**match) -> Profile:
    sim = ProfileStore().get("sim").model_dump()
    sim["image"]["recipe"] = "sglang"
    sim["name"] = "p"
    sim["match"] = match
    return Profile.model_validate(sim)


def test_classify_sorts_by_capability_memory_and_count():
    p = gpu_profile(gpu_name=["NVIDIA GeForce RTX 5090"], compute_capability="12.0", min_memory_gib=31)
    assert classify(p, [card("NVIDIA GeForce RTX 5090", "12.0", 31.8)]).verdict == "runnable"
    small = classify(p, [card("NVIDIA GeForce RTX 5080", "12.0", 16)])
    assert small.verdict == "runnable-with-less-memory" and any("16 GiB" in r for r in small.reasons)
    wrong = classify(p, [card("NVIDIA H200", "9.0", 141)])
    assert wrong.verdict == "incompatible" and "compute capability 9.0" in wrong.reasons[0]
    eight = gpu_profile(compute_capability="10.3", gpu_count=8)
    few = classify(eight, [card("NVIDIA B300", "10.3", 280)] * 4)
    assert few.verdict == "incompatible" and "needs 8 GPUs, the slot has 4" in few.reasons[0]
    assert classify(ProfileStore().get("sim"), []).verdict == "runnable"


def test_annotate_matches_names_profiles_for_each_card():
    p = gpu_profile(gpu_name=["NVIDIA H200"], compute_capability="9.0")
    inv = annotate_matches(Inventory(gpus=[card("NVIDIA H200", "9.0", 141)]), [p, ProfileStore().get("sim")])
    assert inv.gpus[0].matching_profiles == ["p"]


def test_gpus_command_without_a_driver():
    human = run_cli("gpus")
    assert (
        human.returncode == 4 and "NVML is not available" in human.stderr and "Traceback" not in human.stderr
    )
    machine = run_cli("gpus", "--json")
    assert machine.returncode == 4
    body = json.loads(machine.stdout)
    # the empty list scripts read, and the error object every --json command prints
    assert body["gpus"] == [] and "NVML" in body["error"]["message"]
    assert (body["error"]["kind"], body["error"]["exit_code"]) == ("NoGpuError", 4) and body["error"]["hint"]
    # each command's hint says what that command can do without cards
    hints = {
        " ".join(args): json.loads(run_cli(*args, "--json").stdout)["error"]["hint"]
        for args in (
            ("slots", "--profile", "h200-qwen3.6-35b-a3b-fp8"),
            ("rollout", "--all-gpus", "--profile", "sim", "--dry-run"),
            ("plan-memory", "--profile", "h200-qwen3.6-35b-a3b-fp8", "--gpu", "GPU-1234567890"),
            ("profiles", "list", "--local-gpus"),
        )
    }
    assert "DEPLOYTOOL_NVML_STANDIN" in hints["slots --profile h200-qwen3.6-35b-a3b-fp8"]
    assert "--cpu-slot" in hints["rollout --all-gpus --profile sim --dry-run"]
    assert "--card NAME" in hints["plan-memory --profile h200-qwen3.6-35b-a3b-fp8 --gpu GPU-1234567890"]
    assert "without --gpu or --local-gpus" in hints["profiles list --local-gpus"]
