"""The compose renderer: data from the profile, and the compose plugin's own validation."""

from __future__ import annotations

from pathlib import Path

import yaml

from deploytool.host import labels
from deploytool.host.slots import Slot
from deploytool.profiles import ProfileStore
from deploytool.release.compose import RenderRequest, render_compose, write_compose

GPU_A = "GPU-5f3c0a8e-1111-2222-3333-444455556666"
GPU_B = "GPU-aaaabbbb-1111-2222-3333-444455556666"


def request(slot: Slot, **kw) -> RenderRequest:
    return RenderRequest(
        profile=ProfileStore().get("sim-v2"), slot=slot, release=4, image="deploytool/sim:x", **kw
    )


def test_cpu_render_carries_profile_health_labels_and_no_devices():
    doc = render_compose(request(Slot(), host_port=31234))
    assert doc["name"].endswith("-cpu-r4")
    server = doc["services"]["server"]
    assert server["restart"] == "unless-stopped"
    assert server["image"] == "deploytool/sim:x"
    assert server["command"][:3] == ["/opt/venv/bin/python", "-m", "deploytool.sim"]
    assert server["command"][server["command"].index("--decode-tps") + 1] == "400"
    assert server["ports"] == [
        {"target": 30000, "published": "31234", "host_ip": "127.0.0.1", "protocol": "tcp"}
    ]
    health = server["healthcheck"]
    assert health["test"][-1] == "http://127.0.0.1:30000/health"
    assert health["start_period"] == "60s" and health["start_interval"] == "1s" and health["retries"] == 3
    assert server["labels"][labels.SLOT] == "cpu" and server["labels"][labels.RELEASE] == "4"
    assert server["labels"][labels.PROFILE] == "sim-v2" and server["labels"][labels.SIMULATOR] == "true"
    assert server["ipc"] == "private" and server["shm_size"] == "1g" and "deploy" not in server
    assert server["volumes"][0]["target"] == "/cache"
    assert doc["volumes"]["jit-cache"]["external"] is True
    # its network carries the instance and the slot, as its container does (clean-up by label)
    assert doc["networks"]["default"]["labels"] == {
        labels.MANAGED: "true",
        labels.INSTANCE: labels.instance(),
        labels.SLOT: "cpu",
    }


def test_gpu_render_pins_every_uuid():
    doc = render_compose(request(Slot((GPU_A, GPU_B))))
    devices = doc["services"]["server"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "device_ids": [GPU_A, GPU_B], "capabilities": ["gpu"]}]
    assert doc["services"]["server"]["labels"][labels.GPUS] == f"{GPU_A},{GPU_B}"
    assert doc["name"].endswith("-gpu-5f3c0a8e-aaaabbbb-r4")


def test_written_file_is_yaml_of_the_same_data(tmp_path: Path):
    req = request(Slot())
    path = write_compose(req, tmp_path / "compose.yaml")
    assert yaml.safe_load(path.read_text()) == render_compose(req)


def test_docker_compose_config_accepts_both_kinds(tmp_path: Path, docker_engine):
    for slot in (Slot(), Slot((GPU_A, GPU_B))):
        path = write_compose(request(slot), tmp_path / f"{slot.name}.yaml")
        normalized = yaml.safe_load(docker_engine.compose_config(path))
        server = normalized["services"]["server"]
        assert server["healthcheck"]["start_interval"] == "1s"
        if not slot.is_cpu:
            assert server["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == [GPU_A, GPU_B]


def test_render_command_writes_the_file_and_prints_without_an_engine(tmp_path: Path):
    from conftest import run_cli

    out = tmp_path / "r" / "compose.yaml"
    written = run_cli(
        "render",
        "--cpu",
        "--profile",
        "sim",
        "--image",
        "deploytool/sim:x",
        "--port",
        "31999",
        "-o",
        str(out),
        env={"DOCKER_HOST": "unix:///nonexistent.sock"},
    )
    assert written.returncode == 0, written.stderr
    doc = yaml.safe_load(out.read_text())
    assert doc["services"]["server"]["ports"][0]["published"] == "31999"
    printed = run_cli(
        "render",
        "--gpu",
        GPU_B,
        "--gpu",
        GPU_A,
        "--profile",
        "sim",
        "--image",
        "x",
        env={"DOCKER_HOST": "unix:///nonexistent.sock"},
    )
    assert printed.returncode == 0, printed.stderr
    devices = yaml.safe_load(printed.stdout)["services"]["server"]["deploy"]["resources"]["reservations"][
        "devices"
    ]
    assert devices[0]["device_ids"] == [GPU_A, GPU_B]  # sorted: the same cards are the same slot
