"""The registry-free CUDA base: NVIDIA's toolkit wheels, hash-locked, on the local Debian base.

Always run (the light part of the GPU image's proof): the checked-in locks agree with each other and with
the version matrix; a wheelhouse whose wheel changed is refused naming it (by deploytool before
the build, and by pip's --require-hashes in it); and on the real engine, the compiler-only
image (nvcc wheels, ~110 MB, cached between runs) reports the pinned nvcc, compiles a kernel
to a cubin for sm_120, and its kernels in a slot's cache volume are kept while the toolchain
is unchanged and wiped when it changes. The full GPU image is tests/test_gpu_image.py
(`make gpu-image`).
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from cuda_kernels import AXPY, cubin_arch

from deploytool.errors import BuildError, ProfileError, UsageError
from deploytool.host import labels
from deploytool.host.slots import Slot
from deploytool.image import cudabase, locks, wheelhouse
from deploytool.image.recipes import sglang as recipe
from deploytool.image.versions import check_profile, load_matrix
from deploytool.profiles import Profile, ProfileStore
from deploytool.release import cache

WHEELS_PROFILE = "rtx5090-qwen3.6-35b-a3b-nvfp4-wheels"
CUDA = "13.3.1"


def _with_image(profile: Profile, **changes: object) -> Profile:
    return profile.model_copy(update={"image": profile.image.model_copy(update=changes)})


# -- locks: data that agrees with itself -----------------------------------------------------
def test_checked_in_locks_pin_one_compiler_everywhere() -> None:
    compiler = locks.read_toolkit_lock(CUDA, cudabase.COMPILER)
    toolkit = locks.read_toolkit_lock(CUDA, cudabase.TOOLKIT)
    venv = locks.venv_lock(ProfileStore().get(WHEELS_PROFILE))
    assert venv is not None
    # cuda-toolkit 13.3.1 resolves to its patch releases (read from its metadata by pip)
    assert compiler.version_of("cuda-toolkit") == toolkit.version_of("cuda-toolkit") == CUDA
    assert compiler.version_of("nvidia-cuda-nvcc") == "13.3.73"
    assert compiler.version_of("nvidia-cuda-runtime") == "13.3.29"
    # the venv takes nvcc (asked for unpinned by humming-kernels and tilelang) at the toolkit's
    for name in locks.COMPILER_PACKAGES:
        assert venv.version_of(name) == toolkit.version_of(name), name
    # and the versions of the matrix row
    img = ProfileStore().get(WHEELS_PROFILE).image
    assert venv.version_of("sglang") == img.runtime_version and venv.version_of("torch") == img.torch_version
    assert venv.version_of("sglang-kernel") == img.kernel_version
    assert venv.version_of("flashinfer-python") == img.flashinfer_version
    for lock in (compiler, toolkit, venv):
        names = [wheelhouse.normal_name(w.name) for w in lock.wheels]
        assert len(names) == len(set(names)), f"{lock.path.name} names a package twice"
        assert all(len(w.sha256) == 64 and w.filename.endswith(".whl") for w in lock.wheels)
    assert load_matrix().cuda_row(CUDA).wheels[cudabase.COMPILER] == list(compiler.requirements)


def test_matrix_checks_a_wheels_base() -> None:
    profile = ProfileStore().get(WHEELS_PROFILE)
    check_profile(profile)
    with pytest.raises(ProfileError, match=r"image.base.*toolkit comes from wheels"):
        check_profile(_with_image(profile, base="nvidia/cuda:13.3.1-cudnn-devel-ubuntu24.04"))
    with pytest.raises(ProfileError, match=r"image.python.*Debian bookworm"):
        check_profile(_with_image(profile, python="3.12"))
    with pytest.raises(ProfileError, match=r"no toolkit wheels for CUDA 13.2.1"):
        check_profile(_with_image(profile, cuda="13.2.1"))


def test_a_malformed_lock_line_is_refused_with_its_line_number(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    path.write_text("# header\ntorch==2.14.1\n")
    with pytest.raises(UsageError, match=r"x.lock:2: not a lock line"):
        wheelhouse.read_lock(path)


# -- a changed wheel fails the build, named ------------------------------------------------
def _tiny_wheel(folder: Path, name: str, version: str, body: str) -> Path:
    """A real, installable wheel of one module (what pip checks is the file's sha256)."""
    dist = f"{name}-{version}.dist-info"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    files = {
        f"{name}.py": body,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{dist}/RECORD"] = "".join(f"{n},,\n" for n in files) + f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():  # fixed dates: the same content gives the same bytes
            archive.writestr(zipfile.ZipInfo(member, date_time=(2026, 1, 1, 0, 0, 0)), text)
    return path


def _lock_of(folder: Path, lock_path: Path) -> wheelhouse.Lock:
    wheels = [
        wheelhouse.LockedWheel(p.name.split("-")[0], p.name.split("-")[1], p.name, wheelhouse.file_sha256(p))
        for p in sorted(folder.glob("*.whl"))
    ]
    return wheelhouse.write_lock(
        lock_path,
        wheels,
        title="test",
        requirements=["alpha", "beta"],
        python="3.11",
        arch="x86_64",
        made_by="test",
    )


def test_a_changed_wheel_is_named_by_deploytool_and_refused_by_pip(tmp_path: Path) -> None:
    house = tmp_path / "house"
    house.mkdir()
    _tiny_wheel(house, "alpha", "1.0", "A = 1\n")
    _tiny_wheel(house, "beta", "2.0", "B = 2\n")
    lock = _lock_of(house, tmp_path / "test.lock")
    assert [p.name for p in wheelhouse.verify(lock, house)] == [
        "alpha-1.0-py3-none-any.whl",
        "beta-2.0-py3-none-any.whl",
    ]

    def pip_install() -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--no-index",
                "--find-links",
                str(house),
                "--require-hashes",
                "--target",
                str(tmp_path / "target"),
                "-r",
                str(lock.path),
            ],
            capture_output=True,
            text=True,
        )

    installed = pip_install()
    assert installed.returncode == 0, installed.stderr
    assert (tmp_path / "target" / "beta.py").read_text() == "B = 2\n"

    _tiny_wheel(house, "beta", "2.0", "B = 'changed'\n")  # same name and version, other bytes
    with pytest.raises(BuildError) as info:
        wheelhouse.verify(lock, house)
    assert (
        "beta-2.0-py3-none-any.whl" in str(info.value) and "alpha" not in str(info.value).split("changed")[1]
    )
    refused = pip_install()
    assert refused.returncode != 0
    assert "DO NOT MATCH THE HASHES" in refused.stderr and "beta" in refused.stderr

    (house / "alpha-1.0-py3-none-any.whl").unlink()
    _tiny_wheel(house, "beta", "2.0", "B = 2\n")
    with pytest.raises(BuildError, match=r"lacks 1 wheel.*alpha-1.0-py3-none-any.whl"):
        wheelhouse.verify(lock, house)


def test_the_image_build_refuses_a_changed_toolkit_wheel_before_building(tmp_path: Path) -> None:
    """`deploytool build --wheelhouse` of the wheels profile, with nvcc's wheel replaced."""
    nvcc = next(
        w for w in locks.read_toolkit_lock(CUDA, cudabase.TOOLKIT).wheels if w.name == "nvidia-cuda-nvcc"
    )
    house = tmp_path / "house"
    house.mkdir()
    (house / nvcc.filename).write_bytes(b"not the wheel the lock names")
    context = tmp_path / "ctx"
    context.mkdir()
    with pytest.raises(BuildError) as info:
        recipe.prepare(ProfileStore().get(WHEELS_PROFILE), context_dir=context, wheelhouse=house)
    assert nvcc.filename in str(info.value) and nvcc.sha256 in str(info.value)
    assert not (context / "cuda-wheels").exists()  # nothing staged


def test_declare_renders_the_toolkit_steps_and_records_the_base_source(tmp_path: Path) -> None:
    profile = ProfileStore().get(WHEELS_PROFILE)
    # declared, not staged: the locks stand for the wheels (nothing is read from a wheelhouse)
    inputs = recipe.declare(profile, wheelhouse=tmp_path)
    fp = inputs.fingerprint
    toolkit = locks.read_toolkit_lock(CUDA, cudabase.TOOLKIT)
    assert fp["base_source"] == "wheels" and fp["nvcc"] == "13.3.73" and fp["toolkit_lock"] == toolkit.digest
    assert (
        fp["wheel_lock"] == locks.venv_lock(profile).digest
        and fp["torch"] == "2.14.1"
        and fp["triton"] == "3.8.0"
    )
    assert inputs.files["requirements.lock"] == locks.venv_lock_path(profile)
    assert inputs.files[toolkit.path.name] == toolkit.path
    assert list(inputs.fetched) == ["cuda-wheels", "wheels"]
    from deploytool.image.build import dockerfile_environment
    from deploytool.image.recipes import recipe_dir

    dockerfile = (
        dockerfile_environment()
        .from_string((recipe_dir("sglang") / "Dockerfile.j2").read_text())
        .render(profile=profile, base_ref="sha256:b", **inputs.template_vars)
    )
    assert "--require-hashes --no-deps --target /opt/cuda-wheels" in dockerfile
    assert (
        "--no-index --find-links /tmp/deploytool/wheels --require-hashes -r /opt/deploytool/locks/requirements.lock"
        in dockerfile
    )
    assert (
        "CUDA_HOME=/usr/local/cuda" in dockerfile
        and "TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas" in dockerfile
    )
    # the wheels leave no layer behind: the last stage copies the install stage's file system
    assert dockerfile.count("\nFROM ") == 2 and "COPY --from=install / /" in dockerfile
    last_stage = dockerfile.split("FROM scratch", 1)[1]
    for name, value in {**recipe.CACHE_ENV, **cudabase.toolkit_env(CUDA)}.items():
        assert f"{name}={value}" in last_stage, name


# -- on the real engine: the compiler-only base ---------------------------------------------
@pytest.fixture(scope="module")
def compiler_image(module_home) -> str:
    from conftest import engine_problem

    if engine_problem():
        pytest.skip(engine_problem())
    from deploytool.host.engine import Engine

    # the wheels (~110 MB) are kept in the shared test cache (DEPLOYTOOL_TEST_CACHE) between runs
    return cudabase.build_base(Engine(), cuda=CUDA, components=cudabase.COMPILER)


def _run(engine, image: str, script: str, bind: Path | None = None) -> str:
    """What `script` prints in a throwaway container of `image` (no network; `bind` at /src)."""
    return engine.run_throwaway(image, script, volume=str(bind) if bind else None, mount="/src")


@pytest.mark.docker
def test_compiler_image_has_the_pinned_nvcc_and_builds_a_cubin_for_sm120(
    compiler_image: str, docker_engine, tmp_path: Path
) -> None:
    nvcc = locks.read_toolkit_lock(CUDA, cudabase.COMPILER).version_of("nvidia-cuda-nvcc")
    version = _run(docker_engine, compiler_image, "nvcc --version")
    assert f"release 13.3, V{nvcc}" in version
    (tmp_path / "axpy.cu").write_text(AXPY)
    tmp_path.chmod(0o777)
    _run(
        docker_engine,
        compiler_image,
        "cd /tmp && nvcc -cubin -arch=sm_120 -o /src/axpy.cubin /src/axpy.cu",
        bind=tmp_path,
    )
    assert cubin_arch((tmp_path / "axpy.cubin").read_bytes()) == 120
    image = docker_engine.image(compiler_image)
    fingerprint = json.loads(image.labels[labels.IMAGE_FINGERPRINT])
    assert fingerprint["base_source"] == "wheels" and fingerprint["nvcc"] == nvcc
    env = dict(e.split("=", 1) for e in image.attrs["Config"]["Env"])
    assert env["CUDA_HOME"] == "/usr/local/cuda" and env["PATH"].startswith("/usr/local/cuda/bin:")


@pytest.mark.docker
def test_cache_keeps_real_kernels_while_the_toolchain_holds_and_wipes_them_when_nvcc_changes(
    compiler_image: str, docker_engine
) -> None:
    """The FlashInfer-free part of the JIT cache check: a real cubin in the slot's volume."""
    slot = Slot()
    engine = docker_engine
    other = None
    try:
        assert cache.prepare_slot_cache(engine, compiler_image, slot).action == "created"
        cache._in_volume(
            engine,
            compiler_image,
            slot,
            f"mkdir -p /cache/kernels && cd /tmp && printf '%s' '{AXPY}' > axpy.cu && "
            "nvcc -cubin -arch=sm_120 -o /cache/kernels/axpy.sm_120.cubin axpy.cu",
        )
        assert cache.read_state(engine, compiler_image, slot).files == 1

        kept = cache.prepare_slot_cache(engine, compiler_image, slot)
        assert kept.action == "kept" and cache.read_state(engine, compiler_image, slot).files == 1

        # The same image, labelled as built by another patch release of the toolkit.
        declared = json.loads(engine.image(compiler_image).labels[labels.IMAGE_FINGERPRINT])
        changed = {**declared, "nvcc": "13.3.33", "cuda": "13.3.0"}
        other, _ = engine.client.images.build(
            fileobj=io.BytesIO(f"FROM {compiler_image}\n".encode()),
            rm=True,
            labels={labels.IMAGE_FINGERPRINT: json.dumps(changed, sort_keys=True)},
        )
        wiped = cache.prepare_slot_cache(engine, other.id, slot)
        assert wiped.action == "wiped" and wiped.files_removed >= 1
        assert wiped.differences["nvcc"] == {"stored": declared["nvcc"], "new": "13.3.33"}
        assert cache.read_state(engine, other.id, slot).files == 0
    finally:
        if other is not None:
            engine.client.images.remove(other.id, force=True)
        with contextlib.suppress(Exception):
            engine.client.volumes.get(slot.cache_volume()).remove(force=True)
