"""The `sglang` recipe: the version matrix refuses impossible pins, prepare() writes what the
Dockerfile needs, and (on the real engine) an image built with a wheelhouse on the local base
carries the labels, the applied patches and the cache environment, and `profiles check`
runs inside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deploytool.errors import ProfileError, UsageError
from deploytool.host import labels
from deploytool.image import flagcheck, patches
from deploytool.image.build import dockerfile_environment
from deploytool.image.recipes import recipe_dir
from deploytool.image.recipes import sglang as recipe
from deploytool.image.versions import check_profile, cuda_of_base, load_matrix
from deploytool.profiles import Profile, ProfileStore

CARD = "rtx5090-qwen3.6-35b-a3b-nvfp4"
TEST_PROFILES = Path(__file__).parent / "profiles_sglang"


def _with_image(profile: Profile, **changes: object) -> Profile:
    return profile.model_copy(update={"image": profile.image.model_copy(update=changes)})


# -- version matrix ----------------------------------------------------------------------------
def test_matrix_rows_come_from_the_data_file() -> None:
    matrix = load_matrix()
    row = matrix.sglang_row("0.5.23")
    assert row is not None and row.torch == ["2.14.1"] and row.kernel_package == "sglang-kernel"
    assert matrix.cuda_row("13.3.1").major == 13
    assert cuda_of_base("nvidia/cuda:13.3.1-cudnn-devel-ubuntu24.04") == "13.3.1"
    assert cuda_of_base("nvidia/cuda:13.3.1-cudnn-devel-ubuntu24.04@sha256:" + "a" * 64) == "13.3.1"
    assert cuda_of_base("deploytool/base:bookworm") is None


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"torch_version": "2.9.1"}, "image.torch_version"),
        ({"cuda": "12.9.1", "base": "nvidia/cuda:12.9.1-cudnn-devel-ubuntu24.04"}, "image.cuda"),
        ({"base": "nvidia/cuda:13.0.2-cudnn-devel-ubuntu24.04"}, "image.base"),
        ({"kernel_version": "0.3.21"}, "image.kernel_version"),
        ({"flashinfer_version": "0.6.13"}, "image.flashinfer_version"),
        ({"python": "3.10"}, "image.python"),
    ],
)
def test_matrix_refuses_an_impossible_combination_naming_the_field(changes: dict, field: str) -> None:
    profile = _with_image(ProfileStore().get(CARD), **changes)
    with pytest.raises(ProfileError) as info:
        recipe.check(profile)
    assert field in str(info.value)


@pytest.mark.parametrize(
    ("changes", "field", "why"),
    [
        ({"python": "3.11"}, "image.python", "no python3.11"),  # Ubuntu 24.04 packages python3.12 only
        ({"base": "nvidia/cuda:13.3.1-cudnn-runtime-ubuntu24.04"}, "image.base", "no nvcc"),
        ({"base": "nvidia/cuda:13.3.1-runtime-ubuntu24.04"}, "image.base", "no nvcc"),
        ({"base": "deploytool/base:bookworm"}, "image.base", "not a recognised nvidia/cuda base"),
        (
            {"base": "registry.example/cuda-with-python:13.3.1"},
            "image.base",
            "not a recognised nvidia/cuda base",
        ),
    ],
)
def test_matrix_refuses_a_base_the_image_cannot_be_built_on(changes: dict, field: str, why: str) -> None:
    profile = _with_image(ProfileStore().get(CARD), **changes)
    with pytest.raises(ProfileError) as info:
        check_profile(profile)
    assert field in str(info.value) and why in str(info.value)
    # the shipped base, by digest, is fine
    check_profile(
        _with_image(
            ProfileStore().get(CARD), base="nvidia/cuda:13.3.1-cudnn-devel-ubuntu24.04@sha256:" + "a" * 64
        )
    )


def test_matrix_refuses_an_unpinned_sglang_release() -> None:
    with pytest.raises(ProfileError, match="not in the version matrix"):
        check_profile(_with_image(ProfileStore().get(CARD), runtime_version="0.4.0"))


def test_cpu_image_takes_a_cpu_torch_and_no_kernels() -> None:
    profile = ProfileStore([TEST_PROFILES]).get("sglang-cpu-test")
    recipe.check(profile)
    with pytest.raises(ProfileError, match=r"image.kernel_version"):
        recipe.check(_with_image(profile, kernel_version="0.4.10"))


# -- prepare + template ------------------------------------------------------------------------
def _render(profile: Profile, inputs: recipe.RecipeInputs) -> str:
    template = dockerfile_environment().from_string((recipe_dir("sglang") / "Dockerfile.j2").read_text())
    return template.render(profile=profile, base_ref="sha256:base", **inputs.template_vars)


def test_prepare_gpu_image_pins_everything_and_points_caches_under_cache(tmp_path: Path) -> None:
    profile = ProfileStore().get(CARD)
    inputs = recipe.prepare(profile, context_dir=tmp_path, wheelhouse=None)
    reqs = (tmp_path / "requirements.txt").read_text().split()
    assert {"sglang==0.5.23", "torch==2.14.1", "sglang-kernel==0.4.10", "flashinfer-python==0.7.2"} <= set(
        reqs
    )
    assert (tmp_path / "patch-series").read_text().split() == patches.series_for(profile).names
    assert (tmp_path / "unidiff.py").is_file()
    fp = inputs.fingerprint
    for key in (
        "cuda",
        "nvcc",
        "gcc",
        "python",
        "torch",
        "triton",
        "sglang",
        "sglang_kernel",
        "flashinfer",
        "patches",
    ):
        assert key in fp, key
    assert fp["cuda"] == "13.3.1" and fp["sglang_kernel"] == "0.4.10"
    assert json.loads(fp["patches"]) == [
        patches.unidiff.hashlib.sha256(p.read_bytes()).hexdigest()
        for p in patches.series_for(profile).paths()
    ]
    dockerfile = _render(profile, inputs)
    assert dockerfile.startswith("# deploytool recipe `sglang`")
    for name, value in recipe.CACHE_ENV.items():
        assert f"{name}={value}" in dockerfile and value.startswith("/cache/")
    assert {
        "FLASHINFER_WORKSPACE_BASE",
        "TRITON_CACHE_DIR",
        "TORCHINDUCTOR_CACHE_DIR",
        "SGLANG_CACHE_DIR",
        "SGLANG_DG_CACHE_DIR",
        "DG_JIT_CACHE_DIR",
        "TVM_FFI_CACHE_DIR",
        "TILELANG_CACHE_DIR",
    } <= set(recipe.CACHE_ENV)
    assert "--no-index" not in dockerfile
    assert "unidiff.py apply" in dockerfile and "toolchain.json" in dockerfile
    assert json.dumps(profile.launch_argv()) in dockerfile


def test_prepare_with_a_wheelhouse_installs_without_an_index(tmp_path: Path) -> None:
    profile = ProfileStore([TEST_PROFILES]).get("sglang-cpu-test")
    house = tmp_path / "house"
    house.mkdir()
    (house / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"not a real wheel")
    context = tmp_path / "ctx"
    context.mkdir()
    with pytest.raises(UsageError, match=r"no sglang 0.5.23 wheel"):
        recipe.prepare(profile, context_dir=context, wheelhouse=house)
    (house / "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl").write_bytes(b"not a real wheel")
    (house / "triton-3.9.0-cp311-cp311-manylinux_2_27_x86_64.whl").write_bytes(b"x")
    inputs = recipe.prepare(profile, context_dir=context, wheelhouse=house)
    assert sorted(p.name for p in (context / "wheels").iterdir()) == sorted(p.name for p in house.iterdir())
    assert inputs.fingerprint["torch"] == "2.13.0+cpu" and inputs.fingerprint["triton"] == "3.9.0"
    assert inputs.fingerprint["cuda"] == "none"
    dockerfile = _render(profile, inputs)
    assert "--no-index --find-links /tmp/deploytool/wheels" in dockerfile
    assert "--no-deps sglang==0.5.23" in dockerfile


def test_cpu_image_without_a_wheelhouse_takes_torch_from_the_configured_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = ProfileStore([TEST_PROFILES]).get("sglang-cpu-test")
    monkeypatch.setenv("DEPLOYTOOL_TORCH_INDEX_URL", "file:///srv/cpu-torch/simple")
    dockerfile = _render(profile, recipe.prepare(profile, context_dir=tmp_path, wheelhouse=None))
    assert "ARG DEPLOYTOOL_TORCH_INDEX_URL=file:///srv/cpu-torch/simple" in dockerfile
    # the torch step alone goes to that index, the other packages to pip's own
    assert dockerfile.count('--index-url "$DEPLOYTOOL_TORCH_INDEX_URL"') == 1
    assert "\"$(grep '^torch==' /tmp/deploytool/requirements.txt)\"" in dockerfile
    monkeypatch.delenv("DEPLOYTOOL_TORCH_INDEX_URL")
    unset = _render(profile, recipe.prepare(profile, context_dir=tmp_path, wheelhouse=None))
    assert "ARG DEPLOYTOOL_TORCH_INDEX_URL=\n" in unset
    assert "DEPLOYTOOL_TORCH_INDEX_URL is not set" in unset and "CUDA build (several GB)" in unset
    # a GPU image wants the CUDA torch: no such argument
    gpu = ProfileStore().get(CARD)
    monkeypatch.setenv("DEPLOYTOOL_TORCH_INDEX_URL", "file:///srv/cpu-torch/simple")
    assert "DEPLOYTOOL_TORCH_INDEX_URL" not in _render(
        gpu, recipe.prepare(gpu, context_dir=tmp_path, wheelhouse=None)
    )


# -- a real build on the local base ------------------------------------------------------------
@pytest.mark.index
def test_cpu_image_built_from_a_wheelhouse_carries_patches_labels_and_caches(
    docker_engine, sglang_cpu_wheelhouse: Path
) -> None:
    from deploytool.image.build import build

    profile = ProfileStore([TEST_PROFILES]).get("sglang-cpu-test")
    house = sglang_cpu_wheelhouse
    result = build(profile, engine=docker_engine, wheelhouse=house)
    image = docker_engine.image(result.image)
    assert image is not None
    image_labels = image.labels
    assert (
        image_labels[labels.IMAGE_PROFILE] == profile.name and image_labels[labels.IMAGE_RECIPE] == "sglang"
    )
    fingerprint = json.loads(image_labels[labels.IMAGE_FINGERPRINT])
    shipped = [
        patches.unidiff.hashlib.sha256(p.read_bytes()).hexdigest()
        for p in patches.series_for(profile).paths()
    ]
    assert json.loads(fingerprint["patches"]) == shipped
    assert fingerprint["sglang"] == "0.5.23" and fingerprint["torch"].startswith("2.13.0")

    env = dict(e.split("=", 1) for e in image.attrs["Config"]["Env"])
    for name, value in recipe.CACHE_ENV.items():
        assert env.get(name) == value

    # Inside: the toolchain as installed, and the patch applied to the installed package.
    out = docker_engine.run_throwaway(
        result.image,
        "cat /opt/deploytool/toolchain.json; python -c 'import inspect, sglang.srt.utils.common as c; "
        'print("PATCHED" if "_get_device_capability_via_nvml" in inspect.getsource(c) else "PLAIN")\'',
    )
    toolchain = json.loads(out[: out.rindex("}") + 1])
    assert toolchain["sglang"] == "0.5.23" and toolchain["torch"].startswith("2.13.0")
    assert [p["sha256"] for p in toolchain["patches"]] == shipped
    assert out.strip().endswith("PATCHED")

    # The slot cache's fingerprint takes the installed versions over the declared ones.
    from deploytool.host.slots import Slot
    from deploytool.release.cache import expected_fingerprint

    expected = expected_fingerprint(docker_engine, result.image, Slot())
    assert expected["gcc"] == toolchain["gcc"] and expected["torch"] == toolchain["torch"]
    assert expected["patches"] == fingerprint["patches"] and expected["gpu_arch"] == "cpu"

    # profiles check runs inside the image this test built, found by the tag of the profile's
    # inputs (not the newest labelled image: the shared engine keeps other checkouts' ones).
    check = flagcheck.check(profile, wheelhouse=house)
    assert check.where == f"image {result.image}"
    assert flagcheck.find_built_image(profile, wheelhouse=house) == (result.image, None)
    assert check.ok, [(f.flag, f.message) for f in check.failures]
