"""GPU-host preflight for the carried SGLang overlay: versions, the compiler SGLang's JIT kernels
need, every import serving makes, one JIT build. Prints the facts, writes ENV_FILE (exports to
source before launching: CUDA_HOME, a libcudart.so link for the JIT's link step) and exits
non-zero on a blocking problem.

usage: PYTHONPATH=SITE python3 preflight.py ENV_FILE [--jit]"""

import glob
import importlib
import importlib.metadata as md
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback

ENV_FILE = sys.argv[1]
env = {}
bad = []
warn = []


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60).stdout.strip()
    except Exception as e:
        return repr(e)


print(
    "python",
    sys.version.split()[0],
    sys.executable,
    "| libc",
    platform.libc_ver(),
    "| uname",
    platform.release(),
)
nvcc = shutil.which("nvcc") or (
    "/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None
)
print("nvcc:", nvcc, "|", sh(f"{nvcc} --version | tail -2") if nvcc else "MISSING")
cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
print("c++:", cxx, "|", sh(f"{cxx} --version | head -1") if cxx else "MISSING")
if not nvcc:
    bad.append("no nvcc: SGLang 0.5.17 JIT kernels (rope, norms, act) cannot build")
if not cxx:
    bad.append("no host C++ compiler (c++/g++): tvm-ffi JIT cannot build")
if nvcc:
    home = os.environ.get("CUDA_HOME") or os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
    env["CUDA_HOME"] = home
    if not os.path.exists(os.path.join(os.path.dirname(nvcc), "..")):
        pass
    if nvcc != shutil.which("nvcc"):
        env["PATH"] = os.path.dirname(nvcc) + ":" + os.environ.get("PATH", "")
    print(
        "CUDA_HOME:",
        home,
        "| cuda_runtime.h:",
        os.path.exists(f"{home}/include/cuda_runtime.h"),
        "| lib64/libcudart.so:",
        os.path.exists(f"{home}/lib64/libcudart.so"),
    )
    if not os.path.exists(f"{home}/lib64/libcudart.so"):
        cands = (
            glob.glob(f"{home}/lib*/libcudart.so*")
            + glob.glob(sys.prefix + "/lib/python3*/site-packages/nvidia/cu13/lib/libcudart.so*")
            + glob.glob(sys.prefix + "/lib/python3*/site-packages/nvidia/cuda_runtime/lib/libcudart.so*")
        )
        if cands:
            os.makedirs(os.path.join(os.path.dirname(ENV_FILE), "cudart"), exist_ok=True)
            link = os.path.join(os.path.dirname(ENV_FILE), "cudart", "libcudart.so")
            if not os.path.exists(link):
                os.symlink(cands[0], link)
            env["LIBRARY_PATH"] = (
                os.path.join(os.path.dirname(ENV_FILE), "cudart") + ":" + os.environ.get("LIBRARY_PATH", "")
            )
            print("linked", link, "->", cands[0], "(LIBRARY_PATH for the JIT link step)")
        else:
            bad.append("no libcudart.so to link JIT modules against")

import contextlib  # noqa: E402  (beside torch, below)

# torch only once the toolkit's environment above is set: it reads it when imported
import torch  # noqa: E402

print(
    "torch",
    torch.__version__,
    "cuda",
    torch.version.cuda,
    "| available",
    torch.cuda.is_available(),
    "|",
    torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-",
    torch.cuda.get_device_capability(0) if torch.cuda.is_available() else "",
)
for d in [
    "typing_extensions",
    "typing-extensions",
    "anyio",
    "attrs",
    "packaging",
    "regex",
    "huggingface_hub",
    "tokenizers",
    "transformers",
    "triton",
    "torchvision",
    "cuda-bindings",
    "nvidia-ml-py",
    "numpy",
    "pydantic",
    "fastapi",
    "starlette",
    "uvicorn",
    "datasets",
    "pyarrow",
    "flashinfer-python",
    "sglang-kernel",
    "sglang",
    "xgrammar",
    "apache-tvm-ffi",
]:
    with contextlib.suppress(md.PackageNotFoundError):
        print(f"  {d:20s} {md.version(d)}")

for m in [
    "datasets",
    "sglang.bench_serving",
    "deploytool.cli",
    "sgl_kernel",
    "flashinfer",
    "flashinfer.sampling",
    "xgrammar",
    "tvm_ffi",
    "sglang",
    "sglang.srt.entrypoints.http_server",
    "sglang.srt.managers.scheduler",
    "sglang.srt.model_executor.model_runner",
    "sglang.srt.models.qwen3",
    "sglang.srt.models.qwen3_5",
    "sglang.srt.models.qwen3_5_text",
    "sglang.srt.layers.attention.triton_backend",
    "sglang.srt.layers.attention.hybrid_linear_attn_backend",
]:
    t = time.time()
    try:
        mod = importlib.import_module(m)
        extra = f" common_ops={getattr(mod, 'common_ops', None).__file__}" if m == "sgl_kernel" else ""
        print(f"import {m}: ok {time.time() - t:.1f}s{extra}")
    except Exception:
        print(f"import {m}: FAILED")
        traceback.print_exc(limit=3)
        # the benchmark client and deploytool do not stop the server from starting
        (warn if m in ("datasets", "sglang.bench_serving", "deploytool.cli") else bad).append(f"import {m}")

with open(ENV_FILE, "w") as f:
    for k, v in env.items():
        f.write(f"export {k}={v}\n")
print("env:", env)

if "--jit" in sys.argv and not bad:
    for k, v in env.items():
        os.environ[k] = v
    t = time.time()
    try:
        from sglang.kernels.ops.attention import rope

        rope._jit_rotary_embedding_module()
        print(f"JIT compile (rotary_embedding via tvm-ffi + nvcc): ok in {time.time() - t:.1f}s")
    except Exception:
        print("JIT compile: FAILED")
        traceback.print_exc(limit=6)
        bad.append("jit")

print("PREFLIGHT", "OK" if not bad else "FAILED: " + "; ".join(bad), "| warnings:", "; ".join(warn) or "none")
sys.exit(1 if bad else 0)
