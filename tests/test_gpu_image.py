"""The real GPU image of the RTX 5090 profile, on the registry-free wheels base, proven here
without a GPU. Opt-in: it installs ~4.8 GB of locked wheels into a 12.4 GB image.

    make gpu-image        (DEPLOYTOOL_GPU_IMAGE=1 pytest -m gpu_image tests/test_gpu_image.py)

DEPLOYTOOL_GPU_WHEELHOUSE names a folder holding the locked wheels (an air-gapped host); without
it deploytool fills its cache wheelhouse from the index once. Building is a no-op when an image
with the same inputs exists.

What is proven: the pinned nvcc; toolchain.json, the labels and the locks agree with what pip
installed; the patch series is in the installed sglang, byte for byte; `profiles check` runs
inside the image; a kernel compiles for sm_120 and sm_90; a FlashInfer JIT module compiles
with no GPU into /cache and writes nothing else; those real artifacts are kept by the slot
cache while the toolchain holds and wiped when flashinfer's version changes. What needs a GPU
(the driver's libcuda.so.1): importing sgl_kernel, running any kernel.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest
from cuda_kernels import AXPY, cubin_arch

from deploytool.host import labels
from deploytool.host.slots import Slot
from deploytool.image import build, cudabase, flagcheck, locks, patches, wheelhouse
from deploytool.image.in_image import unidiff
from deploytool.profiles import ProfileStore
from deploytool.release import cache

pytestmark = [pytest.mark.docker, pytest.mark.gpu_image]
PROFILE = "rtx5090-qwen3.6-35b-a3b-nvfp4-wheels"
SITE = "/opt/venv/lib/python3.11/site-packages"
# The module FlashInfer compiles on first use for SiLU-and-mul, for the RTX 5090 (SM120) and
# the H200 (SM90), named explicitly as FlashInfer allows when no GPU can be asked.
JIT_ARCHS = "12.0 9.0"
JIT_SCRIPT = """
import json, flashinfer, triton, triton.language as tl
from flashinfer.jit.activation import gen_act_and_mul_module
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import get_ptxas

spec = gen_act_and_mul_module("silu")
spec.build()

@triton.jit
def add(x, y, out, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(out + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)

ptxas = {}
for arch in (120, 90):  # Triton compiles for a named target without asking a GPU
    triton.compile(triton.compiler.ASTSource(fn=add, signature={"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32"},
                                             constexprs={"BLOCK": 128}), target=GPUTarget("cuda", arch, 32))
    ptxas[arch] = get_ptxas(arch).path
print(json.dumps({"flashinfer": flashinfer.__version__, "library": str(spec.get_library_path()),
                  "compiled": spec.is_compiled, "ptxas": ptxas}))
"""


@pytest.fixture(scope="module")
def gpu_image(module_home):
    from conftest import engine_problem

    from deploytool.host.engine import Engine

    if engine_problem():
        pytest.skip(engine_problem())
    profile = ProfileStore().get(PROFILE)
    house = os.environ.get("DEPLOYTOOL_GPU_WHEELHOUSE")
    result = build.build(profile, engine=Engine(), wheelhouse=Path(house) if house else None)
    return profile, result.image


def _run(engine, image: str, script: str, bind: Path | None = None) -> str:
    """What `script` prints in a throwaway container of `image` (no network; `bind` at /src)."""
    return engine.run_throwaway(image, script, volume=str(bind) if bind else None, mount="/src")


def _with_other_flashinfer(engine, image: str, version: str) -> str:
    """`image` with flashinfer-python `version` installed over its own (no dependencies)."""
    import subprocess
    import sys
    import tempfile

    from deploytool.release.state import cache_dir

    house = cache_dir("wheelhouse", "extra")
    if not list(house.glob(f"flashinfer_python-{version}-*.whl")):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--dest",
                str(house),
                *wheelhouse.platform_args("3.11"),
                f"flashinfer-python=={version}",
            ],
            check=True,
        )
    wheel = next(house.glob(f"flashinfer_python-{version}-*.whl"))
    declared = json.loads(engine.image(image).labels[labels.IMAGE_FINGERPRINT])
    with tempfile.TemporaryDirectory() as context:
        os.link(wheel, Path(context) / wheel.name)
        (Path(context) / "Dockerfile").write_text(
            f"FROM {image}\nCOPY {wheel.name} /tmp/\n"
            f"RUN pip install --no-cache-dir --no-deps --no-index /tmp/{wheel.name} && rm /tmp/{wheel.name} "
            "&& python /opt/deploytool/toolchain.py > /opt/deploytool/toolchain.json\n"
        )
        built, _ = engine.client.images.build(
            path=context,
            rm=True,
            forcerm=True,
            labels={
                labels.IMAGE_FINGERPRINT: json.dumps({**declared, "flashinfer": version}, sort_keys=True)
            },
        )
    return built.id


def test_nvcc_is_the_pinned_one(gpu_image, docker_engine) -> None:
    _, image = gpu_image
    nvcc = locks.read_toolkit_lock("13.3.1", cudabase.TOOLKIT).version_of("nvidia-cuda-nvcc")
    out = _run(docker_engine, image, "nvcc --version; command -v nvcc; echo $CUDA_HOME")
    assert f"release 13.3, V{nvcc}" in out and "/usr/local/cuda/bin/nvcc" in out


def test_toolchain_labels_and_locks_agree_with_what_pip_installed(gpu_image, docker_engine) -> None:
    profile, image = gpu_image
    toolchain = json.loads(_run(docker_engine, image, "cat /opt/deploytool/toolchain.json"))
    label = json.loads(docker_engine.image(image).labels[labels.IMAGE_FINGERPRINT])
    venv = locks.venv_lock(profile)
    toolkit = locks.read_toolkit_lock("13.3.1", cudabase.TOOLKIT)
    assert label["base_source"] == toolchain["base_source"] == "wheels"
    # the locks in the image are the checked-in ones, and the labels name them by sha256
    assert toolchain["locks"] == {"requirements.lock": venv.digest, toolkit.path.name: toolkit.digest}
    assert label["wheel_lock"] == venv.digest and label["toolkit_lock"] == toolkit.digest
    # pip installed exactly the locked versions (--require-hashes checked every wheel's sha256)
    installed = {wheelhouse.normal_name(n): v for n, v in toolchain["installed"].items()}
    locked = {wheelhouse.normal_name(w.name): w.version for w in venv.wheels}
    assert {k: v for k, v in installed.items() if k != "pip"} == locked
    assert {wheelhouse.normal_name(n): v for n, v in toolchain["toolkit_installed"].items()} == {
        wheelhouse.normal_name(w.name): w.version for w in toolkit.wheels
    }
    for key, dist in (
        ("torch", "torch"),
        ("triton", "triton"),
        ("sglang", "sglang"),
        ("sglang_kernel", "sglang-kernel"),
        ("flashinfer", "flashinfer-python"),
    ):
        assert label[key] == toolchain[key] == locked[dist], key
    assert label["nvcc"] == toolchain["nvcc"] == toolchain["ptxas"] == toolkit.version_of("nvidia-cuda-nvcc")
    assert toolchain["cuda"] == label["cuda"] == "13.3.1" and toolchain["cuda_home"] == "/usr/local/cuda"


def test_the_patch_series_is_in_the_installed_sglang_byte_for_byte(
    gpu_image, docker_engine, tmp_path: Path
) -> None:
    profile, image = gpu_image
    series = patches.series_for(profile)
    expected = patches.patched_tree(profile, tmp_path / "patched")
    pristine = patches.unpacked_sources(patches.sglang_wheel(series.sglang_version, profile.image.python))
    touched = sorted({fp.path for p in series.paths() for fp in unidiff.parse(p.read_text())})
    assert touched
    for path in touched:
        installed = docker_engine.client.containers.run(
            image, ["cat", f"{SITE}/{path}"], remove=True, network_mode="none"
        )
        assert installed == (expected / path).read_bytes(), path
        assert installed != (pristine / path).read_bytes(), f"{path} is unpatched"


def test_profiles_check_runs_inside_the_image(gpu_image) -> None:
    profile, image = gpu_image
    check = flagcheck.check(profile, image=image)
    assert check.where == f"image {image}"
    assert check.ok, [(f.flag, f.message) for f in check.failures]


def test_a_kernel_compiles_for_sm120_and_sm90(gpu_image, docker_engine, tmp_path: Path) -> None:
    _, image = gpu_image
    (tmp_path / "axpy.cu").write_text(AXPY)
    tmp_path.chmod(0o777)
    _run(
        docker_engine,
        image,
        "cd /tmp && for sm in 120 90; do nvcc -cubin -arch=sm_$sm -o /src/axpy.sm_$sm.cubin "
        "/src/axpy.cu || exit 1; done",
        bind=tmp_path,
    )
    assert cubin_arch((tmp_path / "axpy.sm_120.cubin").read_bytes()) == 120
    assert cubin_arch((tmp_path / "axpy.sm_90.cubin").read_bytes()) == 90


@pytest.mark.timeout(3600)  # compiling at the lowest priority on a shared machine
def test_flashinfer_and_triton_jit_write_only_under_cache_and_the_slot_cache_keeps_then_wipes_it(
    gpu_image, docker_engine
) -> None:
    profile, image = gpu_image
    engine, slot = docker_engine, Slot()
    other = container = None
    try:
        assert cache.prepare_slot_cache(engine, image, slot).action == "created"
        # Triton reads a kernel's source from its file: the script goes into the volume for the
        # run (and is removed after it), so nothing but the compile writes to the volume.
        container = engine.client.containers.create(
            image,
            [
                "sh",
                "-c",
                'mkdir -p /cache/check && printf "%s" "$JIT_SCRIPT" > /cache/check/jit.py '
                "&& python /cache/check/jit.py; rc=$?; rm -rf /cache/check; exit $rc",
            ],
            network_mode="none",
            environment={"FLASHINFER_CUDA_ARCH_LIST": JIT_ARCHS, "JIT_SCRIPT": JIT_SCRIPT},
            volumes={slot.cache_volume(): {"bind": "/cache", "mode": "rw"}},
        )
        container.start()
        status = container.wait(timeout=1800)
        logs = container.logs().decode()
        assert status["StatusCode"] == 0, logs[-3000:]
        report = json.loads(logs.strip().splitlines()[-1])
        assert report["compiled"] and report["library"].startswith("/cache/flashinfer/")
        assert report["flashinfer"] == profile.image.flashinfer_version
        # Triton assembled both with the image's pinned ptxas, not the ones it bundles
        assert set(report["ptxas"].values()) == {"/usr/local/cuda/bin/ptxas"}
        # everything the compile wrote outside the /cache volume: nothing
        assert container.diff() in (None, []), container.diff()
        state = cache.read_state(engine, image, slot)
        listing = cache._in_volume(engine, image, slot, "find /cache -type f | sort")
        assert state.files >= 3 and f"/{profile.image.flashinfer_version}/" in report["library"], listing
        assert report["library"] in listing and ".cuda.o" in listing and "/cache/triton/" in listing

        assert cache.prepare_slot_cache(engine, image, slot).action == "kept"
        assert cache.read_state(engine, image, slot).files == state.files

        # Another flashinfer release really installed over it (0.7.2.post1, a real wheel), its
        # toolchain.json and label rewritten as a build would: the compiled kernels are stale.
        other = _with_other_flashinfer(engine, image, "0.7.2.post1")
        wiped = cache.prepare_slot_cache(engine, other, slot)
        assert wiped.action == "wiped" and wiped.files_removed >= state.files
        assert wiped.differences["flashinfer"] == {
            "stored": profile.image.flashinfer_version,
            "new": "0.7.2.post1",
        }
        assert cache.read_state(engine, other, slot).files == 0
    finally:
        if container is not None:
            container.remove(force=True)
        if other is not None:
            engine.client.images.remove(other, force=True)
        with contextlib.suppress(Exception):
            engine.client.volumes.get(slot.cache_volume()).remove(force=True)


def test_what_needs_the_driver_is_named_and_the_rest_imports(gpu_image, docker_engine) -> None:
    """Without a GPU: torch imports (no device), sgl_kernel does not, because its kernels link
    the driver's libcuda.so.1, which only the NVIDIA container toolkit mounts."""
    _, image = gpu_image
    out = _run(
        docker_engine,
        image,
        "python -c 'import torch; print(torch.__version__, torch.cuda.is_available())'; "
        "python -c 'import sgl_kernel' 2>&1 | tail -n 20; echo rc=$?",
    )
    assert "2.14.1+cu130 False" in out
    assert "libcuda.so.1: cannot open shared object file" in out
