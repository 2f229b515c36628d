"""`deploytool build --lock`: the wheel locks of a profile's image, made with pip's resolver.

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

from . import cudabase
from ..errors import UsageError
from ..profiles import Profile
from ..resources import resource
from .wheelhouse import Lock, fill, read_lock, resolve, write_lock

# Toolkit packages the venv must take at the toolkit's own versions when something asks for them.
COMPILER_PACKAGES = ("nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm", "nvidia-cuda-cccl", "nvidia-nvjitlink")


def venv_lock_path(profile: Profile, target_arch: str | None = None) -> Path:
    img = profile.image
    return resource("images", "locks",
                    f"sglang-{img.runtime_version}-cuda{img.cuda}-py{img.python}.{target_arch or cudabase.arch()}.lock")


def venv_lock(profile: Profile) -> Lock | None:
    """The profile's venv lock when one was made (a GPU image), else None."""
    if profile.image.cuda is None:
        return None
    path = venv_lock_path(profile)
    return read_lock(path) if path.is_file() else None


def make_locks(profile: Profile, *, wheelhouse: Path | None = None) -> list[Lock]:
    """Resolve and write the profile's locks (needs a package index); with `wheelhouse`, also
    download every locked wheel into it."""
    from .recipes import sglang as recipe

    recipe.check(profile)
    img = profile.image
    if img.cuda is None:
        raise UsageError(f"profile {profile.name!r} is a CPU image (image.cuda: null): it has no wheel lock",
                         hint="locks are made for GPU images")
    made_by = f"deploytool build --lock --profile {profile.name}"
    arch = cudabase.arch()
    locks = []
    for components in (cudabase.COMPILER, cudabase.TOOLKIT):
        reqs = cudabase.toolkit_requirements(img.cuda, components)
        locks.append(write_lock(cudabase.toolkit_lock_path(img.cuda, components), resolve(reqs, python=img.python),
                                title=f"CUDA {img.cuda} toolkit wheels, {components}", requirements=reqs,
                                python=img.python, arch=arch, made_by=made_by))
    toolkit = locks[-1]
    pins = [f"{name}=={toolkit.version_of(name)}" for name in COMPILER_PACKAGES if toolkit.version_of(name)]
    reqs = recipe.requirements(profile) + pins
    locks.append(write_lock(venv_lock_path(profile), resolve(reqs, python=img.python),
                            title=f"sglang {img.runtime_version} image venv (CUDA {img.cuda})", requirements=reqs,
                            python=img.python, arch=arch, made_by=made_by))
    if wheelhouse is not None:
        for lock in locks:
            fill(lock, wheelhouse, python=img.python)
    return locks


def read_toolkit_lock(cuda: str, components: str) -> Lock:
    return read_lock(cudabase.toolkit_lock_path(cuda, components))
