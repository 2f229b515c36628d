"""Runs inside the image at build time: prints, as JSON, the toolchain actually installed
(what compiles kernels into /cache), so the fingerprint label can be checked against reality.
Standard library only; a tool that is missing is reported as "none"."""

import hashlib
import importlib.metadata as md
import json
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

PACKAGES = {
    "torch": "torch",
    "triton": "triton",
    "sglang": "sglang",
    "sglang_kernel": "sglang-kernel",
    "flashinfer": "flashinfer-python",
    "flashinfer_cubin": "flashinfer-cubin",
    "flashinfer_jit_cache": "flashinfer-jit-cache",
    "deep_gemm": "sgl-deep-gemm",
    "tilelang": "tilelang",
    "tvm_ffi": "apache-tvm-ffi",
    "cutlass_dsl": "nvidia-cutlass-dsl",
    "flash_attn": "flash-attn-4",
    "nvidia_ml_py": "nvidia-ml-py",
}


def tool(cmd, pattern):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "none"
    match = re.search(pattern, out)
    return match.group(1) if match else "none"


def version(dist):
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "none"


def patches():
    folder = Path("/opt/deploytool/patches")
    series = folder / "series"
    names = (
        [line.split("#")[0].strip() for line in series.read_text().splitlines()] if series.exists() else []
    )
    return [{"name": n, "sha256": hashlib.sha256((folder / n).read_bytes()).hexdigest()} for n in names if n]


def locks():
    """sha256 of each wheel lock the image was installed from (the labels name the same)."""
    folder = Path("/opt/deploytool/locks")
    return (
        {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.lock"))}
        if folder.is_dir()
        else {}
    )


def installed(path=None):
    """Every distribution pip installed (the venv's, or the toolkit prefix's), name -> version."""
    dists = md.distributions(path=path) if path else md.distributions()
    return {d.metadata["Name"]: d.version for d in sorted(dists, key=lambda d: d.metadata["Name"].lower())}


facts = {
    "cuda": os.environ.get("CUDA_VERSION", "none"),
    "base_source": os.environ.get("DEPLOYTOOL_BASE_SOURCE", "registry"),
    "cuda_home": os.environ.get("CUDA_HOME", "none"),
    "nvcc_path": shutil.which("nvcc") or "none",
    "nvcc": tool(["nvcc", "--version"], r"release [\d.]+, V([\d.]+)"),
    "ptxas": tool(["ptxas", "--version"], r"release [\d.]+, V([\d.]+)"),
    "gcc": tool(["gcc", "-dumpfullversion"], r"([\d.]+)"),
    "python": platform.python_version(),
    **{key: version(dist) for key, dist in PACKAGES.items()},
    "patches": patches(),
    "locks": locks(),
    "installed": installed(),
    "toolkit_installed": installed(["/opt/cuda-wheels"]) if os.path.isdir("/opt/cuda-wheels") else {},
}
print(json.dumps(facts, indent=2, sort_keys=True))
