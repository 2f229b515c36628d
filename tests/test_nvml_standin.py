"""The stand-in NVML is drop-in for nvidia-ml-py: the same call names and constants, every
NVML call deploytool's code makes, pynvml's own structs and errors, and NVML's documented
answers for what a card does not have."""

from __future__ import annotations

import re
from pathlib import Path

import pynvml
import pytest

from deploytool.errors import UsageError
from deploytool.host.gpus import read_inventory
from deploytool.host.nvml_standin import StandInNvml
from deploytool.host.standin_host import load_host

ROOT = Path(__file__).resolve().parents[1]
HOSTS = ROOT / "tests" / "data" / "nvml-hosts"


def standin(name: str) -> StandInNvml:
    nvml = StandInNvml.from_file(HOSTS / f"{name}.yaml")
    nvml.nvmlInit()
    return nvml


def code_of(excinfo: pytest.ExceptionInfo) -> int:
    assert isinstance(excinfo.value, pynvml.NVMLError)
    return excinfo.value.value


def test_every_nvml_call_in_deploytool_is_answered_under_pynvml_s_own_name():
    calls = set()
    for path in (ROOT / "src" / "deploytool").rglob("*.py"):
        calls |= set(re.findall(r"\bnvml\.(nvml[A-Za-z0-9_]+)\(", path.read_text()))
    assert {
        "nvmlDeviceGetTopologyCommonAncestor",
        "nvmlDeviceGetNvLinkState",
        "nvmlDeviceGetP2PStatus",
    } <= calls
    answered = {name for name in dir(StandInNvml) if name.startswith("nvml")}
    assert calls <= answered, f"calls the stand-in does not answer: {sorted(calls - answered)}"
    assert answered <= set(dir(pynvml)), f"names pynvml lacks: {sorted(answered - set(dir(pynvml)))}"


def test_constants_are_pynvml_s():
    for name in (
        "NVML_CLOCK_MEM",
        "NVML_TOPOLOGY_SYSTEM",
        "NVML_NVLINK_MAX_LINKS",
        "NVML_AFFINITY_SCOPE_NODE",
        "NVML_P2P_CAPS_INDEX_NVLINK",
        "NVML_FEATURE_ENABLED",
        "NVML_ERROR_NOT_SUPPORTED",
    ):
        assert getattr(StandInNvml, name) == getattr(pynvml, name)


def test_nothing_answers_before_nvmlinit_and_after_the_last_shutdown():
    nvml = StandInNvml.from_file(HOSTS / "rtx5090x2.yaml")
    with pytest.raises(pynvml.NVMLError) as before:
        nvml.nvmlDeviceGetCount()
    assert code_of(before) == pynvml.NVML_ERROR_UNINITIALIZED
    nvml.nvmlInit()
    nvml.nvmlInit()
    nvml.nvmlShutdown()
    assert nvml.nvmlDeviceGetCount() == 2  # NVML counts its inits
    nvml.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()


def test_a_pcie_card_answers_not_supported_for_nvlink_and_mig():
    nvml = standin("rtx5090x2")
    card = nvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetNvLinkState(card, 0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetMigMode(card)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetNumaNodeId(card)  # not a Grace system: the card's memory is no NUMA node
    with pytest.raises(pynvml.NVMLError) as past:
        nvml.nvmlDeviceGetHandleByIndex(2)
    assert code_of(past) == pynvml.NVML_ERROR_INVALID_ARGUMENT


def test_nvlink_answers_per_link_and_past_the_last_link():
    nvml = standin("b300x8")
    card = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetNvLinkState(card, 17) == pynvml.NVML_FEATURE_ENABLED
    assert nvml.nvmlDeviceGetNvLinkVersion(card, 0) == pynvml.NVML_NVLINK_VERSION_5_0
    assert nvml.nvmlDeviceGetNvLinkRemoteDeviceType(card, 0) == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
    remote = nvml.nvmlDeviceGetNvLinkRemotePciInfo(card, 1)
    assert (
        isinstance(remote, pynvml.nvmlPciInfo_t) and remote.busId == "00000000:06:00.0"
    )  # pynvml decodes it
    with pytest.raises(pynvml.NVMLError) as past:
        nvml.nvmlDeviceGetNvLinkState(card, 18)  # a B300 has 18 links
    assert code_of(past) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    bridge_less = standin("h200x2-pcie-switch")
    h200 = bridge_less.nvmlDeviceGetHandleByIndex(0)
    assert bridge_less.nvmlDeviceGetNvLinkState(h200, 0) == pynvml.NVML_FEATURE_DISABLED  # links, none up
    with pytest.raises(pynvml.NVMLError_NotSupported):
        bridge_less.nvmlDeviceGetNvLinkRemotePciInfo(h200, 0)


def test_topology_and_peer_to_peer_follow_the_described_tree():
    nvml = standin("b300x8")
    h = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(8)]
    assert nvml.nvmlDeviceGetTopologyCommonAncestor(h[0], h[1]) == pynvml.NVML_TOPOLOGY_NODE
    assert nvml.nvmlDeviceGetTopologyCommonAncestor(h[0], h[4]) == pynvml.NVML_TOPOLOGY_SYSTEM
    assert (
        nvml.nvmlDeviceGetP2PStatus(h[0], h[4], pynvml.NVML_P2P_CAPS_INDEX_NVLINK)
        == pynvml.NVML_P2P_STATUS_OK
    )
    switch = standin("h200x2-pcie-switch")
    a, b = (switch.nvmlDeviceGetHandleByIndex(i) for i in range(2))
    assert switch.nvmlDeviceGetTopologyCommonAncestor(a, b) == pynvml.NVML_TOPOLOGY_SINGLE
    # pynvml's READ index is a one-element tuple (a stray comma): both spellings answer
    assert switch.nvmlDeviceGetP2PStatus(a, b, pynvml.NVML_P2P_CAPS_INDEX_READ) == pynvml.NVML_P2P_STATUS_OK
    assert switch.nvmlDeviceGetP2PStatus(a, b, 0) == pynvml.NVML_P2P_STATUS_OK
    assert (
        switch.nvmlDeviceGetP2PStatus(a, b, pynvml.NVML_P2P_CAPS_INDEX_NVLINK)
        == pynvml.NVML_P2P_STATUS_NOT_SUPPORTED
    )
    geforce = standin("rtx5090x2")
    x, y = (geforce.nvmlDeviceGetHandleByIndex(i) for i in range(2))
    assert geforce.nvmlDeviceGetTopologyCommonAncestor(x, y) == pynvml.NVML_TOPOLOGY_HOSTBRIDGE
    assert (
        geforce.nvmlDeviceGetP2PStatus(x, y, pynvml.NVML_P2P_CAPS_INDEX_WRITE)
        == pynvml.NVML_P2P_STATUS_GPU_NOT_SUPPORTED
    )


def test_mig_devices_have_their_own_handles_and_no_card_level_readings():
    nvml = standin("h200-mig")
    card = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetMigMode(card) == [pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE]
    mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(card, 1)
    assert nvml.nvmlDeviceGetUUID(mig).startswith("MIG-") and nvml.nvmlDeviceGetName(mig).endswith(
        "MIG 3g.71gb"
    )
    assert (
        nvml.nvmlDeviceGetMemoryInfo(mig).total == 71424 << 20 and nvml.nvmlDeviceGetGpuInstanceId(mig) == 2
    )
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetEnforcedPowerLimit(mig)
    with pytest.raises(pynvml.NVMLError) as empty:
        nvml.nvmlDeviceGetMigDeviceHandleByIndex(card, 2)  # room for 7, two made
    assert code_of(empty) == pynvml.NVML_ERROR_NOT_FOUND
    plain = nvml.nvmlDeviceGetHandleByIndex(1)
    assert nvml.nvmlDeviceGetMigMode(plain) == [0, 0] and nvml.nvmlDeviceGetMaxMigDeviceCount(plain) == 0


def test_affinity_answers_are_nvml_s_bitmask_words():
    nvml = standin("b300x8")
    far = nvml.nvmlDeviceGetHandleByIndex(5)
    nodes = nvml.nvmlDeviceGetMemoryAffinity(far, 1, pynvml.NVML_AFFINITY_SCOPE_NODE)
    assert list(nodes) == [0b10]
    cpus = nvml.nvmlDeviceGetCpuAffinity(far, 4)  # node 1: CPUs 56-111 and 168-223, 64 to a word
    assert list(cpus) == [(1 << 64) - (1 << 56), (1 << 48) - 1, (1 << 64) - (1 << 40), (1 << 32) - 1]


def test_a_host_without_a_driver_fails_nvmlinit_and_the_inventory_says_so():
    inventory = read_inventory(StandInNvml.from_file(HOSTS / "no-driver.yaml"))
    assert inventory.gpus == [] and "Driver Not Loaded" in inventory.error


def test_a_bad_host_file_names_the_file_the_line_and_the_field(tmp_path):
    (tmp_path / "host.yaml").write_text(
        (HOSTS / "rtx5090x2.yaml").read_text().replace("power_limit_w: 575", "power_limit_w: lots")
    )
    with pytest.raises(UsageError) as bad:
        load_host(tmp_path / "host.yaml")
    assert f"{tmp_path / 'host.yaml'}:" in bad.value.message and "gpus.1.power_limit_w" in bad.value.message
    (tmp_path / "peer.yaml").write_text(
        (HOSTS / "rtx5090x2.yaml")
        .read_text()
        .replace(
            "    p2p_over_pcie: false\n",
            "    p2p_over_pcie: false\n    nvlink: {links: 2, remote: [1, 5]}\n",
            1,
        )
    )
    with pytest.raises(UsageError, match="no GPU 5 on this host"):
        load_host(tmp_path / "peer.yaml")


def test_a_described_host_is_named_in_errors_and_doctor_and_never_deployed_to(tmp_path):
    """The variable, not a command-line file, chose the host: its errors name it; doctor says
    the figures are the file's; a real up or rollout on its fake UUIDs is refused (plans are fine)."""
    import json

    from conftest import run_cli

    missing = run_cli("gpus", "--json", env={"DEPLOYTOOL_NVML_STANDIN": str(tmp_path / "gone.yaml")})
    error = json.loads(missing.stdout)["error"]
    assert missing.returncode == 2 and error["message"].startswith(
        "DEPLOYTOOL_NVML_STANDIN names a host file"
    )
    assert "unset DEPLOYTOOL_NVML_STANDIN" in error["hint"]

    host = str(HOSTS / "h200x2-pcie-switch.yaml")
    env = {"DEPLOYTOOL_NVML_STANDIN": host, "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    checks = {c["name"]: c for c in json.loads(run_cli("doctor", "--json", env=env).stdout)["checks"]}
    driver = checks["nvidia driver"]
    assert driver["status"] != "pass" and driver["data"]["described_host"] == host
    assert driver["detail"].startswith(f"the host is described by DEPLOYTOOL_NVML_STANDIN={host}, not read")
    for args in (
        ["up", "--gpu", "GPU-a2000001-4b3a-4c2d-9e1f-000000000001", "--port", "39218"],
        ["rollout", "--all-gpus"],
    ):
        out = run_cli(*args, "--profile", "h200-qwen3.6-35b-a3b-fp8", "--json", env=env)
        error = json.loads(out.stdout)["error"]
        assert out.returncode == 2 and error["kind"] == "UsageError", out.stdout + out.stderr
        assert (
            "the host is described by DEPLOYTOOL_NVML_STANDIN" in error["message"]
            and "--dry-run" in error["hint"]
        )


def test_a_card_nvml_cannot_read_is_an_inventory_error_not_a_traceback():
    """nvmlDeviceGetUUID and GetName have no fallback: a lost card (NVML_ERROR_GPU_IS_LOST) is
    said as the inventory's error, naming the card."""
    nvml = StandInNvml.from_file(HOSTS / "rtx5090x2.yaml")
    read_uuid = nvml.nvmlDeviceGetUUID

    def lost_second(handle):
        if read_uuid(handle) == read_inventory(StandInNvml.from_file(HOSTS / "rtx5090x2.yaml")).gpus[1].uuid:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return read_uuid(handle)

    nvml.nvmlDeviceGetUUID = lost_second
    inventory = read_inventory(nvml)
    assert inventory.gpus == [] and inventory.error.startswith("NVML could not read GPU 1 (")
    assert "GPU is lost" in inventory.error and inventory.source.startswith("stand-in NVML over")
