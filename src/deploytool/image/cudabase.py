"""A CUDA base without an image registry: NVIDIA's toolkit wheels on the local Debian base.

`image.base_source: wheels` puts the steps of images/cuda-wheels/toolkit.Dockerfile.j2 into
the recipe's image: the wheels of a component set of the CUDA row (images/versions.yaml,
`cuda.<version>.wheels`), locked by sha256 in images/locks/cuda-<version>-<set>.<arch>.lock,
installed into /usr/local/cuda-<major.minor> with the layout of NVIDIA's toolkit. The same
steps alone, on the Debian base, make a compiler-only image (`build_base`) that `make test`
builds to compile a kernel for sm_120 without any GPU.

Wheelhouses: an explicit one (`--wheelhouse DIR`) is only checked against the lock (an
air-gapped host downloads nothing); without one, deploytool keeps the locked wheels in its
cache ($DEPLOYTOOL_HOME/cache/wheelhouse/locked) and downloads only what is missing there.
"""

from __future__ import annotations

import hashlib
import json
import platform
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2

from ..errors import BuildError, UsageError
from ..host import labels
from ..release.state import build_lock, cache_dir
from ..resources import resource
from .versions import load_matrix
from .wheelhouse import Lock, fill, read_lock, verify

if TYPE_CHECKING:
    from ..host.engine import Engine

TEMPLATES = ("images", "cuda-wheels")
COMPILER, TOOLKIT = "compiler", "toolkit"


def arch() -> str:
    return {"arm64": "aarch64"}.get(platform.machine(), platform.machine())


def toolkit_requirements(cuda: str, components: str) -> list[str]:
    row = load_matrix().cuda_row(cuda)
    if row is None or components not in row.wheels:
        raise UsageError(
            f"the version matrix has no {components!r} wheels for CUDA {cuda}",
            hint=f'add cuda."{cuda}".wheels.{components} to images/versions.yaml',
        )
    return row.wheels[components]


def toolkit_lock_path(cuda: str, components: str, target_arch: str | None = None) -> Path:
    return resource("images", "locks", f"cuda-{cuda}-{components}.{target_arch or arch()}.lock")


def default_wheelhouse() -> Path:
    """Where deploytool keeps locked wheels between builds: file names carry the version and
    every file is checked against its lock's sha256 before use, so one folder serves all locks."""
    return cache_dir("wheelhouse", "locked")


def locked_wheels(lock: Lock, wheelhouse: Path | None, *, python: str) -> Path:
    """A wheelhouse holding every wheel of `lock`, checked: the given one (never downloaded
    into), or deploytool's cache, filled from the index where something is missing."""
    if wheelhouse is not None:
        verify(lock, wheelhouse)
        return wheelhouse
    return fill(lock, default_wheelhouse(), python=python)


def fetch_locked(lock: Lock, wheelhouse: Path | None, *, python: str) -> Callable[[], list[Path]]:
    """For a recipe's `fetched` inputs: when the image is built, exactly the lock's wheels,
    checked against it (locked_wheels). The lock file itself is the declared input."""

    def fetch() -> list[Path]:
        house = locked_wheels(lock, wheelhouse, python=python)
        return [house / wheel.filename for wheel in lock.wheels]

    return fetch


def toolkit_env(cuda: str) -> dict[str, str]:
    """What an nvidia/cuda devel image sets, for the wheels' toolkit: nvcc on PATH, CUDA_HOME
    for the JIT of FlashInfer (cpp_ext.get_cuda_path), torch and tvm-ffi, the link-time stub
    of libcuda on LIBRARY_PATH, the driver's libraries (mounted by the NVIDIA container
    toolkit) on LD_LIBRARY_PATH, and Triton's ptxas pinned to the toolkit's own (Triton ships
    one of its own otherwise)."""
    return {
        "CUDA_HOME": "/usr/local/cuda",
        "CUDA_PATH": "/usr/local/cuda",
        "CUDA_VERSION": cuda,
        "DEPLOYTOOL_BASE_SOURCE": "wheels",
        "PATH": "/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LIBRARY_PATH": "/usr/local/cuda/lib64/stubs",
        "LD_LIBRARY_PATH": "/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
        # Triton 3.8 bundles ptxas 12.9 (used below SM100) and 13.3.33 as ptxas-blackwell
        # (SM100 and up, the RTX 5090's SM120 too: triton/backends/nvidia/compiler.py get_ptxas)
        "TRITON_PTXAS_PATH": "/usr/local/cuda/bin/ptxas",
        "TRITON_PTXAS_BLACKWELL_PATH": "/usr/local/cuda/bin/ptxas",
    }


@dataclass
class ToolkitStage:
    """The toolkit steps of a Dockerfile, its environment and what they add to the fingerprint."""

    steps: str
    env: dict[str, str]
    lock: Lock
    fingerprint: dict[str, str]


def declare_toolkit(cuda: str, components: str, *, python: str) -> ToolkitStage:
    """The toolkit steps, their environment and fingerprint, from the lock alone (no wheel is
    read): the build context gets the lock file and, in `cuda-wheels/`, the wheels it names."""
    lock = read_lock(toolkit_lock_path(cuda, components))
    major, minor = cuda.split(".")[:2]
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(resource(*TEMPLATES)),  # nosec B701: renders a Dockerfile, not HTML
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    variables = toolkit_env(cuda)
    steps = env.get_template("toolkit.Dockerfile.j2").render(
        cuda=cuda,
        cuda_mm=f"{major}.{minor}",
        cuda_major=major,
        python=python,
        lock_name=lock.path.name,
        toolkit_requirements=" ".join(toolkit_requirements(cuda, components)),
        toolkit_env=variables,
    )
    fingerprint = {
        "base_source": "wheels",
        "cuda": cuda,
        "nvcc": lock.version_of("nvidia-cuda-nvcc") or "none",
        "toolkit_lock": lock.digest,
    }
    return ToolkitStage(steps, variables, lock, fingerprint)


def base_tag(cuda: str, components: str, digest: str) -> str:
    return f"deploytool/cuda-wheels:{cuda}-{components}-{digest[:12]}"


def build_base(
    engine: Engine,
    *,
    cuda: str,
    components: str = COMPILER,
    python: str = "3.11",
    base: str = "deploytool/base:bookworm",
    wheelhouse: Path | None = None,
) -> str:
    """The toolkit steps alone on the Debian base (the compiler-only image `make test` builds).
    Its tag is a hash of the Dockerfile, the lock and the base's id, known before any wheel is
    touched; built once, through Engine like every other build."""
    base_image = engine.image(base)
    if base_image is None:
        raise BuildError(f"base image {base!r} is not on this engine", hint="make base-image")
    stage = declare_toolkit(cuda, components, python=python)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(resource(*TEMPLATES)),  # nosec B701: renders a Dockerfile, not HTML
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    dockerfile = env.get_template("Dockerfile.base.j2").render(
        cuda=cuda, components=components, base=base, base_ref=base_image.id, toolkit_steps=stage.steps
    )
    digest = hashlib.sha256("\0".join([dockerfile, stage.lock.digest, base_image.id]).encode()).hexdigest()
    tag = base_tag(cuda, components, digest)
    with build_lock(tag):  # another deploytool building it: wait, then find it
        if engine.image(tag) is not None:
            return tag
        fingerprint = {**stage.fingerprint, "python": python, "image_kind": f"cuda-{components}"}
        image_labels = {
            labels.IMAGE_RECIPE: "cuda-wheels",
            labels.IMAGE_INPUTS_HASH: digest,
            labels.IMAGE_FINGERPRINT: json.dumps(fingerprint, sort_keys=True),
            "org.opencontainers.image.base.name": base,
        }
        context = Path(tempfile.mkdtemp(prefix="cuda-wheels-", dir=cache_dir("build")))
        try:
            from .recipes import link_or_copy

            for wheel in fetch_locked(stage.lock, wheelhouse, python=python)():
                link_or_copy(wheel, context / "cuda-wheels" / wheel.name)
            shutil.copy2(stage.lock.path, context / stage.lock.path.name)
            (context / "Dockerfile").write_text(dockerfile)
            log: list[str] = []
            for event in engine.build_events(context, tag=tag, labels=image_labels, no_cache=False):
                if "error" in event:
                    detail = (event.get("errorDetail") or {}).get("message") or event["error"]
                    raise BuildError(
                        f"build of {tag} failed: {detail.strip()}\n"
                        + "\n".join("    " + x for x in log[-15:])
                    )
                log.extend(x for x in event.get("stream", "").splitlines() if x.strip())
            return tag
        finally:
            shutil.rmtree(context, ignore_errors=True)
