"""The card profiles: what each must hold to launch as the source documents it, their qualify gates (validated by the
qualify suites' own settings models), and their rendered compose files (checked by the real
`docker compose config`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from deploytool.host import gpus
from deploytool.host.fit import classify
from deploytool.host.slots import Slot
from deploytool.image.recipes import sglang as recipe
from deploytool.profiles import ProfileStore
from deploytool.qualify.config import suite_settings
from deploytool.qualify.suites import registry
from deploytool.release.compose import RenderRequest, render_compose, write_compose

QWEN = ["rtx5090-qwen3.6-35b-a3b-nvfp4", "rtx-pro-6000-qwen3.6-35b-a3b-nvfp4", "h200-qwen3.6-35b-a3b-fp8"]
GLM = ["b300x8-glm5.2-nvfp4-tp8", "b300x8-glm5.2-nvfp4-tep8", "gb300x4-glm5.2-nvfp4-tp4"]
UUIDS = [f"GPU-{i:08x}-1111-2222-3333-444455556666" for i in range(1, 9)]


@pytest.fixture(scope="module")
def store() -> ProfileStore:
    return ProfileStore()


def test_base_is_abstract_and_every_card_extends_it(store: ProfileStore) -> None:
    assert "sglang-base" not in store.names() and "sglang-base" in store.names(include_abstract=True)
    for name in QWEN + GLM:
        profile = store.get(name)
        assert profile.chain[-1] == "sglang-base", profile.chain
        assert profile.image.recipe == "sglang" and profile.server.command == [
            "python3",
            "-m",
            "sglang.launch_server",
        ]
        recipe.check(profile)  # one row of the version matrix
        # Hub ids by default: deploytool passes --model-path from model.hub.
        hub = (
            "nvidia/GLM-5.2-NVFP4"
            if name in GLM
            else "Qwen/Qwen3.6-35B-A3B-FP8"
            if name.startswith("h200")
            else "nvidia/Qwen3.6-35B-A3B-NVFP4"
        )
        assert profile.model.hub == hub and profile.model.host_path is None
        assert "model-path" not in profile.server.args and profile.launch_args()["model-path"] == hub
        assert profile.server.args["context-length"] == profile.model.context_length


def test_rtx5090_profile_is_the_one_the_source_describes(store: ProfileStore) -> None:
    p = store.get("rtx5090-qwen3.6-35b-a3b-nvfp4")
    a = p.server.args
    assert (p.match.compute_capability, p.match.gpu_count, p.match.gpu_name) == (
        "12.0",
        1,
        ["NVIDIA GeForce RTX 5090"],
    )
    assert p.image.cuda == "13.3.1" and p.image.base.startswith("nvidia/cuda:13.3.1-cudnn-devel-ubuntu24.04")
    assert p.model.context_length == 262144 and p.model.vision and p.model.tools
    assert a["moe-runner-backend"] == "cutlass"
    assert (a["speculative-algorithm"], a["speculative-num-steps"], a["speculative-eagle-topk"]) == (
        "NEXTN",
        5,
        1,
    )
    assert (
        a["mamba-ssm-dtype"] == "bfloat16"
        and a["max-running-requests"] == 8
        and a["mem-fraction-static"] == 0.88
    )
    assert (a["reasoning-parser"], a["tool-call-parser"]) == ("qwen3", "qwen3_coder")
    assert p.server.env["SGLANG_FLASHINFER_MOE_FUSED_FINALIZE"] == "1"
    gates = suite_settings(registry(), p, None)
    assert gates["gsm8k"].min_accuracy == 0.94
    assert gates["needle"].target_tokens == 225_000
    assert gates["stress"].long_prompt_tokens == 200_000
    assert gates["preflight"].min_running_requests == 8 and gates["preflight"].require_full_context_kv


@pytest.mark.parametrize("name", QWEN + GLM)
def test_every_card_profile_has_valid_gates(store: ProfileStore, name: str) -> None:
    profile = store.get(name)
    gates = suite_settings(registry(), profile, None)
    assert gates["preflight"].min_running_requests == profile.server.args["max-running-requests"]
    assert gates["needle"].target_tokens < profile.model.context_length
    assert gates["stress"].long_prompt_tokens < profile.model.context_length


@pytest.mark.parametrize("name", GLM)
def test_glm_profiles(store: ProfileStore, name: str) -> None:
    p = store.get(name)
    a = p.server.args
    assert (a["speculative-algorithm"], a["speculative-num-steps"], a["speculative-num-draft-tokens"]) == (
        "EAGLE",
        5,
        6,
    )
    assert a["kv-cache-dtype"] == "fp8_e4m3" and a["context-length"] == 90_000
    assert (
        a["max-running-requests"] == 16
        and a["chunked-prefill-size"] == 8192
        and a["mem-fraction-static"] == 0.87
    )
    assert a["bf16-gemm-backend"] == "cutedsl"
    assert (a["reasoning-parser"], a["tool-call-parser"]) == ("glm45", "glm47")
    assert p.server.env == {"SGLANG_OPT_USE_TOPK_V2": "1", "SGLANG_ENABLE_MOE_DEFERRED_FINALIZE": "1"}
    assert a["tp-size"] == p.match.gpu_count
    assert a.get("ep-size") == (8 if name.endswith("tep8") else None)


def test_gpu_count_is_a_hard_limit_for_the_8_gpu_profile(store: ProfileStore) -> None:
    card = gpus.GpuInfo(
        index=0,
        uuid=UUIDS[0],
        name="NVIDIA B300 SXM6 AC",
        compute_capability="10.3",
        memory_total_mib=275_000,
        memory_free_mib=275_000,
        power_limit_w=None,
        pcie_link_gen=None,
        pcie_link_gen_max=None,
        pcie_link_width=None,
        pcie_link_width_max=None,
    )
    profile = store.get("b300x8-glm5.2-nvfp4-tp8")
    assert classify(profile, [card] * 4).verdict == "incompatible"
    assert classify(profile, [card] * 8).verdict == "runnable"


def _render(store: ProfileStore, name: str, gpu_ids: list[str]) -> dict:
    return render_compose(
        RenderRequest(
            profile=store.get(name),
            slot=Slot(tuple(gpu_ids)),
            release=1,
            image=f"deploytool/sglang:{name}-000000000000",
        )
    )


def _assert_carries_profile(server: dict, store: ProfileStore, name: str, gpu_ids: list[str]) -> None:
    profile = store.get(name)
    devices = server["deploy"]["resources"]["reservations"]["devices"]
    assert [d for dev in devices for d in dev["device_ids"]] == gpu_ids
    assert any(v["target"] == recipe.CACHE_MOUNT for v in server["volumes"])
    assert server["command"] == profile.launch_argv()
    for key, value in profile.server.env.items():
        assert server["environment"][key] == value


@pytest.mark.parametrize(
    ("name", "count"), [("rtx5090-qwen3.6-35b-a3b-nvfp4", 1), ("b300x8-glm5.2-nvfp4-tep8", 8)]
)
def test_rendered_compose_pins_uuids_mounts_cache_and_carries_flags(
    store: ProfileStore, name: str, count: int
) -> None:
    doc = _render(store, name, UUIDS[:count])
    _assert_carries_profile(doc["services"]["server"], store, name, UUIDS[:count])


@pytest.mark.parametrize(
    ("name", "count"), [("rtx5090-qwen3.6-35b-a3b-nvfp4", 1), ("b300x8-glm5.2-nvfp4-tep8", 8)]
)
def test_docker_compose_config_accepts_the_card_profiles(
    store: ProfileStore, name: str, count: int, tmp_path: Path, docker_engine
) -> None:
    req = RenderRequest(
        profile=store.get(name),
        slot=Slot(tuple(UUIDS[:count])),
        release=1,
        image=f"deploytool/sglang:{name}-000000000000",
    )
    path = write_compose(req, tmp_path / "compose.yaml")
    normalized = yaml.safe_load(docker_engine.compose_config(path))
    server = normalized["services"]["server"]
    _assert_carries_profile(server, store, name, UUIDS[:count])
