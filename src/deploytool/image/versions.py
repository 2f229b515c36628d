"""The version matrix (images/versions.yaml): which CUDA, torch, sglang, sglang-kernel and
flashinfer releases go together, and the oldest driver each CUDA toolkit needs.

`check_profile` refuses an impossible combination before any build starts, naming the profile
field that is wrong and the values that would fit.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ..errors import ProfileError, UsageError
from ..profiles import ImageSpec, Profile
from ..resources import resource
from ..yamlio import load_yaml

# nvidia/cuda:<version>-<flavour>-<os>[@sha256:...]; the version is what the matrix keys on,
# the flavour says whether nvcc is there (devel), the OS which python3.X apt can install.
_CUDA_BASE = re.compile(
    r"^(?:[\w.-]+/)*nvidia/cuda:(?P<version>\d+\.\d+\.\d+)-(?P<flavour>[\w.-]+)"
    r"-(?P<os>[a-z]+\d+(?:\.\d+)?)(?:@sha256:[0-9a-f]{64})?$"
)


@dataclass(frozen=True)
class CudaRow:
    version: str
    major: int
    min_driver: str
    # base_source: wheels -> component set ("compiler", "toolkit") -> pip requirements
    wheels: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class SglangRow:
    version: str
    python: list[str]
    cuda_major: list[int]
    torch: list[str]
    kernel_package: str
    kernel: list[str]
    flashinfer: list[str]
    flashinfer_cubin: str | None
    cpu_torch: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Matrix:
    source: Path
    cuda: dict[str, CudaRow]
    sglang: dict[str, SglangRow]
    base_os_python: dict[str, list[str]] = field(default_factory=dict)

    def cuda_row(self, version: str) -> CudaRow | None:
        return self.cuda.get(version)

    def sglang_row(self, version: str) -> SglangRow | None:
        return self.sglang.get(version)


def load_matrix(path: Path | None = None) -> Matrix:
    path = path or resource("images", "versions.yaml")
    return _load(path)


@lru_cache(maxsize=4)
def _load(path: Path) -> Matrix:
    data = load_yaml(path).data or {}
    try:
        cuda = {
            str(v): CudaRow(
                version=str(v),
                major=int(row["major"]),
                min_driver=str(row["min_driver"]),
                wheels={str(k): [str(x) for x in reqs] for k, reqs in (row.get("wheels") or {}).items()},
            )
            for v, row in (data.get("cuda") or {}).items()
        }
        sglang = {}
        for v, row in (data.get("sglang") or {}).items():
            sglang[str(v)] = SglangRow(
                version=str(v),
                python=[str(x) for x in row["python"]],
                cuda_major=[int(x) for x in row["cuda_major"]],
                torch=[str(x) for x in row["torch"]],
                kernel_package=str(row["kernel_package"]),
                kernel=[str(x) for x in row["kernel"]],
                flashinfer=[str(x) for x in row["flashinfer"]],
                flashinfer_cubin=None
                if row.get("flashinfer_cubin") is None
                else str(row["flashinfer_cubin"]),
                cpu_torch=[str(x) for x in (row.get("cpu_validation") or {}).get("torch", [])],
            )
        base_os_python = {
            str(os_): [str(x) for x in pythons] for os_, pythons in (data.get("base_os_python") or {}).items()
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(
            f"{path}: malformed version matrix ({exc!r})",
            hint="every sglang row needs python, cuda_major, torch, kernel_package, kernel, flashinfer",
        ) from None
    return Matrix(source=path, cuda=cuda, sglang=sglang, base_os_python=base_os_python)


def cuda_of_base(base: str) -> str | None:
    """The CUDA version in an nvidia/cuda base reference, or None for any other base."""
    m = _CUDA_BASE.match(base)
    return m.group("version") if m else None


def cuda_base_parts(base: str) -> tuple[str, str, str] | None:
    """(version, flavour, os) of an nvidia/cuda base, e.g. ('13.3.1', 'cudnn-devel', 'ubuntu24.04')."""
    m = _CUDA_BASE.match(base)
    return (m.group("version"), m.group("flavour"), m.group("os")) if m else None


# bad(field, got, allowed, why): one pinned value the matrix does not allow, with the values that would fit.
Bad = Callable[[str, object, object, str], None]


def check_profile(profile: Profile, matrix: Matrix | None = None) -> list[str]:
    """Refuse a profile whose pinned versions are no row of the matrix (ProfileError naming
    the field and the values that would fit). Returns notes worth showing (none today)."""
    matrix = matrix or load_matrix()
    img = profile.image
    where = f"profile {profile.name!r} ({profile.source or 'no file'})"
    problems: list[str] = []

    def bad(field_name: str, got: object, allowed: object, why: str) -> None:
        problems.append(f"image.{field_name} = {got!r}: {why} (the matrix allows {allowed})")

    if img.runtime_version is None:
        raise ProfileError(
            f"{where}: image.runtime_version (the sglang release) is not set",
            hint=f"pinned releases in {matrix.source}: {', '.join(sorted(matrix.sglang))}",
        )
    row = matrix.sglang_row(img.runtime_version)
    if row is None:
        raise ProfileError(
            f"{where}: sglang {img.runtime_version} is not in the version matrix",
            hint=f"pinned releases: {', '.join(sorted(matrix.sglang))}; add a row to {matrix.source}",
        )
    if img.python not in row.python:
        bad("python", img.python, row.python, f"sglang {row.version} ships no wheel for it")
    parts = cuda_base_parts(img.base)
    if (
        parts is not None
        and parts[2] in matrix.base_os_python
        and img.python not in matrix.base_os_python[parts[2]]
    ):
        bad(
            "python",
            img.python,
            matrix.base_os_python[parts[2]],
            f"the base {img.base} is {parts[2]}, whose apt has no python{img.python}",
        )
    if img.cuda is None:
        _check_cpu_image(img, row, bad)
    else:
        _check_cuda_image(img, img.cuda, row, parts, bad, matrix)
    if problems:
        raise ProfileError(
            f"{where}: these pinned versions do not go together:\n  " + "\n  ".join(problems),
            hint=f"fix the profile, or add a tested row to {matrix.source}",
        )
    return []


def _check_cpu_image(img: ImageSpec, row: SglangRow, bad: Bad) -> None:
    """A CPU image: the parser and the patches only, never a server."""
    if img.torch_version not in row.cpu_torch:
        bad(
            "torch_version",
            img.torch_version,
            row.cpu_torch,
            "not a CPU torch this sglang's parser is known to run on",
        )
    for name in ("kernel_version", "flashinfer_version"):
        if getattr(img, name) is not None:
            bad(name, getattr(img, name), None, "a CPU image (image.cuda: null) carries no CUDA kernels")


def _check_cuda_image(
    img: ImageSpec,
    cuda_version: str,
    row: SglangRow,
    parts: tuple[str, str, str] | None,
    bad: Bad,
    matrix: Matrix,
) -> None:
    """A CUDA image: its toolkit, its base (`parts`: cuda_base_parts of it) and the pins of
    torch and the kernels against the sglang release's row."""
    cuda = matrix.cuda_row(cuda_version)
    if cuda is None:
        bad("cuda", cuda_version, sorted(matrix.cuda), "unknown CUDA toolkit")
    elif cuda.major not in row.cuda_major:
        bad(
            "cuda",
            cuda_version,
            [v for v, c in matrix.cuda.items() if c.major in row.cuda_major],
            f"sglang {row.version} and its kernels are built for CUDA {'/'.join(map(str, row.cuda_major))}",
        )
    if img.base_source == "wheels":
        _check_wheels_base(img, cuda, bad, matrix)
    elif parts is None:
        bad(
            "base",
            img.base,
            f"an nvidia/cuda:{cuda_version}-cudnn-devel-<os> base",
            "not a recognised nvidia/cuda base, so its CUDA cannot be checked against image.cuda",
        )
    elif parts[0] != cuda_version:
        bad(
            "base",
            img.base,
            f"an nvidia/cuda:{cuda_version}-... base",
            f"the base is CUDA {parts[0]}, image.cuda says {cuda_version}",
        )
    elif "devel" not in parts[1].split("-"):
        bad(
            "base",
            img.base,
            f"an nvidia/cuda:{cuda_version}-cudnn-devel-{parts[2]} base",
            f"a '{parts[1]}' base has no nvcc, and the kernels compile on first use (a devel base is needed)",
        )
    if img.torch_version not in row.torch:
        bad("torch_version", img.torch_version, row.torch, f"sglang {row.version} pins another torch")
    if img.kernel_version not in row.kernel:
        bad(
            "kernel_version",
            img.kernel_version,
            row.kernel,
            f"sglang {row.version} pins another {row.kernel_package}",
        )
    if img.flashinfer_version not in row.flashinfer:
        bad(
            "flashinfer_version",
            img.flashinfer_version,
            row.flashinfer,
            f"sglang {row.version} pins another flashinfer",
        )


# deploytool/base:<suite> (scripts/make-base-image.sh): its suite says which Python it has.
_LOCAL_BASE = re.compile(r"^deploytool/base:(?P<suite>[a-z]+)(?:@sha256:[0-9a-f]{64})?$")


def _check_wheels_base(img: ImageSpec, cuda: CudaRow | None, bad: Bad, matrix: Matrix) -> None:
    """base_source: wheels: the CUDA toolkit comes from NVIDIA's wheels onto a plain OS base,
    so the base must not be an nvidia/cuda one, and the matrix must know the toolkit's wheels."""
    if cuda_base_parts(img.base) is not None:
        bad(
            "base",
            img.base,
            "a base without CUDA, e.g. deploytool/base:bookworm",
            "image.base_source is 'wheels': the toolkit comes from wheels, not from an nvidia/cuda base "
            "(use base_source: registry for that)",
        )
    local = _LOCAL_BASE.match(img.base)
    if (
        local
        and local["suite"] in matrix.base_os_python
        and img.python not in matrix.base_os_python[local["suite"]]
    ):
        bad(
            "python",
            img.python,
            matrix.base_os_python[local["suite"]],
            f"the base {img.base} is Debian {local['suite']}, whose Python is another",
        )
    if cuda is not None and "toolkit" not in cuda.wheels:
        bad(
            "cuda",
            img.cuda,
            [v for v, c in matrix.cuda.items() if "toolkit" in c.wheels],
            f"the matrix has no toolkit wheels for CUDA {img.cuda} (cuda.{img.cuda}.wheels in {matrix.source.name})",
        )


def min_driver_for(cuda_version: str, matrix: Matrix | None = None) -> str | None:
    row = (matrix or load_matrix()).cuda_row(cuda_version)
    return row.min_driver if row else None


def version_tuple(text: str) -> tuple[int, ...]:
    """'580.65.06' -> (580, 65, 6), for comparing driver versions."""
    return tuple(int(p) for p in re.findall(r"\d+", text))
