"""Recipe `sglang`: a patched, pinned SGLang runtime image (images/sglang/Dockerfile.j2).

Two kinds of image, chosen by the profile's `image.cuda`:
  * gpu (image.cuda set, an nvidia/cuda:<cuda>-cudnn-devel-ubuntu24.04 base, by digest when
    given): torch, sglang, sglang-kernel and flashinfer at the versions of the version matrix
    (images/versions.yaml), sglang's other dependencies at the versions its wheel pins;
  * cpu (image.cuda: null): sglang without its GPU packages, the light packages its parser
    imports and a CPU torch. It serves nothing; it proves the patches apply and lets
    `profiles check` run inside an image on a machine without a GPU (the tests build one).

Either way the patch series of the sglang release is applied to the installed package, every
kernel cache is pointed under /cache, and /opt/deploytool/toolchain.json records what was
really installed. With `build --wheelhouse DIR` every package comes from DIR, no index.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...errors import UsageError
from ...host import labels
from ...profiles import ImageSpec, Profile
from ...resources import package_dir, resource
from .. import cudabase, local_wheels, locks, runtime_source
from ..install_source import InstallSource, install_source
from ..patches import PatchSeries, series_for
from ..versions import check_profile, load_matrix
from ..wheelhouse import Lock, fill, normal_name, resolve, write_lock
from . import RecipeInputs, materialise

CACHE_MOUNT = "/cache"
# Every JIT/kernel cache the runtime writes, pointed under the slot's cache volume, so that
# cache.py can fingerprint and wipe them as one.
CACHE_ENV: dict[str, str] = {
    "FLASHINFER_WORKSPACE_BASE": f"{CACHE_MOUNT}/flashinfer",
    "TRITON_CACHE_DIR": f"{CACHE_MOUNT}/triton",
    "TORCHINDUCTOR_CACHE_DIR": f"{CACHE_MOUNT}/torchinductor",
    "SGLANG_CACHE_DIR": f"{CACHE_MOUNT}/sglang",
    "SGLANG_DG_CACHE_DIR": f"{CACHE_MOUNT}/deep_gemm",
    "DG_JIT_CACHE_DIR": f"{CACHE_MOUNT}/deep_gemm",
    "TVM_FFI_CACHE_DIR": f"{CACHE_MOUNT}/tvm-ffi",
    "TILELANG_CACHE_DIR": f"{CACHE_MOUNT}/tilelang",
    # Found by compiling in the built image and listing what was written outside /cache
    # (tests/test_gpu_image.py), then reading each package's default:
    # sglang's own JIT kernels default to ~/.cache/sglang/jit, not SGLANG_CACHE_DIR
    # (sglang/kernels/jit/utils/compile/cache.py);
    "SGLANG_JIT_CACHE_DIR": f"{CACHE_MOUNT}/sglang-jit",
    # CUTLASS's Python DSL (nvidia-cutlass-dsl, imported by flashinfer) writes to
    # $TMPDIR/<user>/cutlass_python_cache at import (cutlass/base_dsl/cache_helpers.py);
    "CUTE_DSL_CACHE_DIR": f"{CACHE_MOUNT}/cute-dsl",
    # and its experimental DSL (@cute.experimental.jit), instantiated at import too, by its own
    # prefix (nvidia_cutlass_dsl/.../cutlass_dsl/cutlass.py: name = "CUTE_EXPERIMENTAL_DSL");
    "CUTE_EXPERIMENTAL_DSL_CACHE_DIR": f"{CACHE_MOUNT}/cute-experimental-dsl",
    # flash-attn-4's, quack's, humming-kernels' and cuda-tile's compiled kernels (their
    # cache_utils / cache / utils/jit / _env modules), and the driver's PTX JIT cache.
    "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR": f"{CACHE_MOUNT}/flash-attn-cute",
    "QUACK_CACHE_DIR": f"{CACHE_MOUNT}/quack",
    "HUMMING_CACHE_DIR": f"{CACHE_MOUNT}/humming",
    "CUDA_TILE_CACHE_DIR": f"{CACHE_MOUNT}/cuda-tile",
    "CUDA_CACHE_PATH": f"{CACHE_MOUNT}/nv",
    # torch's cpp_extension builds (~/.cache/torch_extensions) and numba's compiled functions
    # (next to their sources in site-packages, by default).
    "TORCH_EXTENSIONS_DIR": f"{CACHE_MOUNT}/torch-extensions",
    "NUMBA_CACHE_DIR": f"{CACHE_MOUNT}/numba",
}


def check(profile: Profile) -> None:
    """The version-matrix check: an impossible combination never reaches a build. So are a
    fork's missing commit, dirty checkout or other release, and a local wheel that changed."""
    check_profile(profile)
    runtime_source.resolve(profile)
    local_wheels.resolve(profile)
    series_for(profile)  # a named patch that does not exist is refused here too


def requirements(profile: Profile) -> list[str]:
    """The pinned top-level packages of the image, one requirement each."""
    img = profile.image
    row = load_matrix().sglang_row(img.runtime_version or "")
    assert row is not None  # check() ran first
    if img.cuda is None:
        parser = resource("images", "sglang", "parser-requirements.txt").read_text().splitlines()
        return [
            f"torch=={img.torch_version}",
            *(x.strip() for x in parser if x.strip() and not x.lstrip().startswith("#")),
        ]
    reqs = [
        f"sglang=={img.runtime_version}",
        f"torch=={img.torch_version}",
        f"{row.kernel_package}=={img.kernel_version}",
        f"flashinfer-python=={img.flashinfer_version}",
        "nvidia-ml-py",
    ]
    if row.flashinfer_cubin:
        reqs.append(f"flashinfer-cubin=={row.flashinfer_cubin}")
    return reqs


def prepare(profile: Profile, *, context_dir: Path, wheelhouse: Path | None) -> RecipeInputs:
    return materialise(declare(profile, wheelhouse=wheelhouse), context_dir)


def declare(profile: Profile, *, wheelhouse: Path | None) -> RecipeInputs:
    img = profile.image
    series = series_for(profile)
    source = runtime_source.resolve(profile)
    own = local_wheels.resolve(profile)
    mode = "cpu" if img.cuda is None else "gpu"
    reqs = image_requirements(profile, source, own)
    files: dict[str, Path | str] = {
        "requirements.txt": "\n".join(reqs) + "\n",
        "patch-series": "\n".join(series.names) + ("\n" if series.names else ""),
        "unidiff.py": package_dir() / "image" / "in_image" / "unidiff.py",
    }
    if source.series is not None:
        files["series"] = source.series
    # A GPU image with a venv lock (images/locks/, `deploytool build --lock`) installs exactly
    # the locked wheels, hash-checked; `base_source: wheels` first installs the CUDA toolkit
    # from its own lock (deploytool.image.cudabase). Without a lock: the older, unlocked paths.
    lock = locks.venv_lock(profile) if mode == "gpu" else None
    toolkit, fetched = toolkit_stage(profile, lock, wheelhouse, files)
    install = install_source(profile, lock=lock, own=own, source=source, wheelhouse=wheelhouse)
    files.update(install.files)
    fetched.update(install.fetched)
    if own:
        # Not hashed from where they lie (their pinned sha256s are in the fingerprint) and
        # checked again when staged: a file that changed after `check` is still refused.
        fetched["local-wheels"] = lambda: [w.path for w in local_wheels.resolve(profile)]
    if source.is_fork:
        fetched["runtime-src"] = lambda: [runtime_source.export_tar(source)]
    return RecipeInputs(
        template_vars=template_vars(
            profile,
            mode=mode,
            install=install,
            toolkit=toolkit,
            source=source,
            series=series,
            own=own,
            wheelhouse=wheelhouse,
        ),
        fingerprint=fingerprint(
            img, mode=mode, series=series, source=source, own=own, install=install, toolkit=toolkit
        ),
        extra_hash_inputs=hash_inputs(
            reqs, series=series, install=install, toolkit=toolkit, source=source, own=own
        ),
        files=files,
        fetched=fetched,
        labels=image_labels(source, own),
        journal={f"runtime_{key}": value for key, value in source.location().items()},
        notes=runtime_source.runtime_notes(profile, source=source, own=own),
    )


def image_requirements(
    profile: Profile, source: runtime_source.ResolvedSource, own: list[local_wheels.LocalWheel]
) -> list[str]:
    """The pinned requirements, with a fork's sglang left out (its tree is installed instead,
    without build isolation, so setuptools comes first) and local wheels in place of their twins."""
    reqs = requirements(profile)
    if source.is_fork:
        reqs = [r for r in reqs if local_wheels.requirement_name(r) != "sglang"]
        reqs += [] if any(local_wheels.requirement_name(r) == "setuptools" for r in reqs) else ["setuptools"]
    return local_wheels.replace_requirements(reqs, own)


def toolkit_stage(
    profile: Profile, lock: Lock | None, wheelhouse: Path | None, files: dict[str, Path | str]
) -> tuple[cudabase.ToolkitStage | None, dict[str, Callable]]:
    """`base_source: wheels`: the CUDA toolkit's stage, its lock file put into `files`, and its
    wheels to fetch at build time. The base's own toolkit (registry) needs none."""
    img = profile.image
    if img.base_source != "wheels":
        return None, {}
    if lock is None:
        raise UsageError(
            f"profile {profile.name!r}: image.base_source 'wheels' needs the wheel lock "
            f"{locks.venv_lock_path(profile)}",
            hint=f"make it where an index is reachable: deploytool build --lock --profile {profile.name}",
        )
    toolkit = cudabase.declare_toolkit(img.cuda or "", cudabase.TOOLKIT, python=img.python)
    files[toolkit.lock.path.name] = toolkit.lock.path
    # the toolkit's wheels first: a changed nvcc wheel is named before gigabytes are checked
    return toolkit, {"cuda-wheels": cudabase.fetch_locked(toolkit.lock, wheelhouse, python=img.python)}


def fingerprint(
    img: ImageSpec,
    *,
    mode: str,
    series: PatchSeries,
    source: runtime_source.ResolvedSource,
    own: list[local_wheels.LocalWheel],
    install: InstallSource,
    toolkit: cudabase.ToolkitStage | None,
) -> dict[str, str]:
    """The toolchain fingerprint: what compiled the kernels (cache.py compares it with a slot's cache)."""

    def version_of(dist: str, pinned: str | None, fallback: str) -> str:
        return install.wheel_versions.get(normal_name(dist)) or pinned or fallback

    patch_hashes = [hashlib.sha256(p.read_bytes()).hexdigest() for p in series.paths()]
    out = {
        "cuda": img.cuda or "none",
        # nvcc, ptxas and gcc come with the base: its reference (a digest pins them) stands for
        # them here; /opt/deploytool/toolchain.json in the image has the exact versions.
        "nvcc": img.cuda or "none",
        "gcc": f"from base {img.base}",
        "python": img.python,
        "torch": version_of("torch", img.torch_version, "none"),
        "triton": version_of("triton", None, f"as pinned by torch {img.torch_version}"),
        "sglang": img.runtime_version or "none",
        "sglang_kernel": version_of("sglang-kernel", img.kernel_version, "none"),
        "flashinfer": version_of("flashinfer-python", img.flashinfer_version, "none"),
        # tilelang, deep-gemm, tvm-ffi, cutlass-dsl: pinned exactly by the sglang wheel's metadata.
        "jit_packages": f"as pinned by sglang {img.runtime_version}" if mode == "gpu" else "none",
        "patches": json.dumps(patch_hashes),
        "image_kind": mode,
        "base_source": img.base_source,
    }
    # Keys only where they say something: the fingerprint of a release image stays as it was.
    if source.is_fork or source.series:
        # `profiles check` matches a built image to the profile by it
        out["sglang_source"] = source.identity
    if own:
        out["local_wheels"] = json.dumps({w.name: w.sha256 for w in own}, sort_keys=True)
    if install.lock_digest is not None:
        out["wheel_lock"] = install.lock_digest
    if toolkit is not None:
        # the compiler is the toolkit lock's nvcc, and gcc the base's apt g++ (toolchain.json has its version)
        out.update(toolkit.fingerprint, gcc=f"apt g++ on {img.base}")
    return out


def template_vars(
    profile: Profile,
    *,
    mode: str,
    install: InstallSource,
    toolkit: cudabase.ToolkitStage | None,
    source: runtime_source.ResolvedSource,
    series: PatchSeries,
    own: list[local_wheels.LocalWheel],
    wheelhouse: Path | None,
) -> dict[str, Any]:
    """The values images/sglang/Dockerfile.j2 is rendered with."""
    img = profile.image
    locked = install.lock_digest is not None
    return {
        "mode": mode,
        "python": img.python,
        "sglang_version": img.runtime_version,
        "pip_source": install.pip_source,
        "wheelhouse": wheelhouse is not None or locked,
        "locked": locked,
        "toolkit_steps": toolkit.steps if toolkit else "",
        "toolkit_env": toolkit.env if toolkit else {},
        # a wheels-based image drops the layers that held the wheels (registry bases keep
        # their own layers, which a flattening stage would copy)
        "flatten": toolkit is not None,
        # the CPU image's torch index (DEPLOYTOOL_TORCH_INDEX_URL, a build arg's default)
        "torch_index_url": os.environ.get("DEPLOYTOOL_TORCH_INDEX_URL", "") if mode == "cpu" else "",
        "cache_env": CACHE_ENV,
        "build_args": dict(img.build_args),
        "command_json": json.dumps(profile.launch_argv()),
        "patch_dir": "series"
        if source.series is not None
        else (f"patches/{img.runtime_version}" if series.names or not source.is_fork else None),
        "local_wheels": bool(own),
        "local_torch": any(w.name == "torch" for w in own),
        "fork": _fork_vars(source, mode=mode, locked=locked, wheelhouse=wheelhouse is not None),
    }


def hash_inputs(
    reqs: list[str],
    *,
    series: PatchSeries,
    install: InstallSource,
    toolkit: cudabase.ToolkitStage | None,
    source: runtime_source.ResolvedSource,
    own: list[local_wheels.LocalWheel],
) -> dict[str, str]:
    """What changes the image without being a file of the context."""
    return {
        "requirements": "\n".join(reqs),
        "patch_series": "\n".join(series.names),
        **({"wheel_lock": install.lock_digest} if install.lock_digest is not None else {}),
        **({"toolkit_lock": toolkit.lock.digest} if toolkit else {}),
        **({"sglang_source": source.identity} if source.is_fork else {}),
        **({"local_wheels": local_wheels.label(own)} if own else {}),
    }


def image_labels(source: runtime_source.ResolvedSource, own: list[local_wheels.LocalWheel]) -> dict[str, str]:
    """The recipe's own labels: where sglang came from (when not the release as shipped) and
    which local wheels replaced the index's."""
    return {
        **(
            {labels.IMAGE_RUNTIME_SOURCE: json.dumps(source.record(), sort_keys=True)}
            if source.is_fork or source.series
            else {}
        ),
        **({labels.IMAGE_LOCAL_WHEELS: local_wheels.label(own)} if own else {}),
    }


def make_locks(profile: Profile, *, wheelhouse: Path | None = None) -> list[Lock]:
    """Resolve and write the profile's locks (needs a package index); with `wheelhouse`, also
    download every locked wheel into it."""
    check(profile)
    img = profile.image
    if img.cuda is None:
        raise UsageError(
            f"profile {profile.name!r} is a CPU image (image.cuda: null): it has no wheel lock",
            hint="locks are made for GPU images",
        )
    made_by = f"deploytool build --lock --profile {profile.name}"
    arch = cudabase.arch()
    made: list[Lock] = []
    for components in (cudabase.COMPILER, cudabase.TOOLKIT):
        reqs = cudabase.toolkit_requirements(img.cuda, components)
        made.append(
            write_lock(
                cudabase.toolkit_lock_path(img.cuda, components),
                resolve(reqs, python=img.python),
                title=f"CUDA {img.cuda} toolkit wheels, {components}",
                requirements=reqs,
                python=img.python,
                arch=arch,
                made_by=made_by,
            )
        )
    toolkit = made[-1]
    pins = [
        f"{name}=={toolkit.version_of(name)}" for name in locks.COMPILER_PACKAGES if toolkit.version_of(name)
    ]
    reqs = requirements(profile) + pins
    made.append(
        write_lock(
            locks.venv_lock_path(profile),
            resolve(reqs, python=img.python),
            title=f"sglang {img.runtime_version} image venv (CUDA {img.cuda})",
            requirements=reqs,
            python=img.python,
            arch=arch,
            made_by=made_by,
        )
    )
    if wheelhouse is not None:
        for lock in made:
            fill(lock, wheelhouse, python=img.python)
    return made


def _fork_vars(
    source: runtime_source.ResolvedSource, *, mode: str, locked: bool, wheelhouse: bool
) -> dict | None:
    """How the Dockerfile installs a fork's tree: after the other packages, without build
    isolation; without its dependencies where they are already fixed (a CPU image takes none,
    a locked image has the release's), else resolving them like the release's wheel would."""
    if not source.is_fork:
        return None
    args = ["--no-deps"] if mode == "cpu" or locked else []
    if locked or wheelhouse:
        args += ["--no-index", "--find-links", "/tmp/deploytool/wheels"]  # nosec B108: a path inside the image being built
    return {
        "tar": f"{source.key}.tar",
        "subdir": source.subdir,
        "version": source.version,
        "identity": source.identity,
        "pip_args": " ".join(args),
    }


def fill_wheelhouse(profile: Profile, dest: Path) -> Path:
    """Download every wheel the profile's image installs into `dest` (for `build --wheelhouse`
    on a host without an index: run this where an index is reachable, carry the folder over).
    A CPU image's torch must be a CPU build; pip's find-links is where one is taken from."""
    import platform
    import subprocess
    import sys

    check(profile)
    dest.mkdir(parents=True, exist_ok=True)
    img = profile.image
    arch = {"arm64": "aarch64"}.get(platform.machine(), platform.machine())
    common = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--only-binary=:all:",
        "--dest",
        str(dest),
        "--python-version",
        img.python,
        "--implementation",
        "cp",
        *(a for n in (36, 34, 28, 27, 17) for a in ("--platform", f"manylinux_2_{n}_{arch}")),
        "--platform",
        f"manylinux2014_{arch}",
    ]
    steps = [requirements(profile)]
    if img.cuda is None:  # sglang itself without its GPU dependencies
        steps.insert(0, ["--no-deps", f"sglang=={img.runtime_version}"])
    for step in steps:
        proc = subprocess.run(common + step, capture_output=True, text=True)
        if proc.returncode != 0:
            raise UsageError(
                f"could not download the wheels of {profile.name} into {dest}:\n"
                + "\n".join("    " + x for x in proc.stderr.strip().splitlines()[-10:])
            )
    return dest
