"""The wheel locks of a profile's image: where they lie and how they are read. The sglang
recipe makes them (`deploytool build --lock`, recipes/sglang.py make_locks) with pip's resolver.

Per row of images/versions.yaml, in images/locks/:

    cuda-<cuda>-compiler.<arch>.lock          nvcc alone (the light image of `make test`)
    cuda-<cuda>-toolkit.<arch>.lock           the toolkit of `base_source: wheels` (CUDA_HOME)
    sglang-<sglang>-cuda<cuda>-py<python>.<arch>.lock
                                              every wheel of the image's virtual environment

The venv lock pins the compiler packages some runtime dependencies pull in unpinned
(humming-kernels and tilelang ask for `nvidia-cuda-nvcc`, which would otherwise be the newest
release, not the image's toolkit) to the toolkit lock's versions: one compiler in the image.
"""

from __future__ import annotations

from pathlib import Path

from ..profiles import Profile
from ..resources import resource
from . import cudabase
from .wheelhouse import Lock, read_lock

# Toolkit packages the venv must take at the toolkit's own versions when something asks for them.
COMPILER_PACKAGES = (
    "nvidia-cuda-nvcc",
    "nvidia-cuda-crt",
    "nvidia-nvvm",
    "nvidia-cuda-cccl",
    "nvidia-nvjitlink",
)


def venv_lock_path(profile: Profile, target_arch: str | None = None) -> Path:
    img = profile.image
    return resource(
        "images",
        "locks",
        f"sglang-{img.runtime_version}-cuda{img.cuda}-py{img.python}.{target_arch or cudabase.arch()}.lock",
    )


def venv_lock(profile: Profile) -> Lock | None:
    """The profile's venv lock when one was made (a GPU image), else None."""
    if profile.image.cuda is None:
        return None
    path = venv_lock_path(profile)
    return read_lock(path) if path.is_file() else None


def read_toolkit_lock(cuda: str, components: str) -> Lock:
    return read_lock(cudabase.toolkit_lock_path(cuda, components))
