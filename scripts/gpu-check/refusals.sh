#!/bin/bash
# The refusal table's GPU side (docs/measured/h200-refusals.md): unpack the overlay and the model
# folders as run.sh does, then start each launch of refusals.py; results in $OUT (or RESULTS_DIR).
#   bash .gpu/refusals.sh [--only ID,...]
set -u
G=$(cd "$(dirname "$0")" && pwd)
W=/tmp/gpu-check
R=${OUT:-${RESULTS_DIR:-$W/out}}
mkdir -p "$W" "$R"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TVM_FFI_CACHE_DIR=$W/cache/tvm-ffi TRITON_CACHE_DIR=$W/cache/triton GPU_CHECK_WORK=$W
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$NVCC" ] && export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$NVCC")")")}
unpack() { [ -f "$2/.ok" ] || { mkdir -p "$2" && tar -xJf "$1" -C "$2" && touch "$2/.ok"; }; }
date; unpack "$G/overlay.tar.xz" "$W/site" & unpack "$G/models.tar.xz" "$W/unpacked-models" & wait
[ -d "$W/models" ] || mv "$W/unpacked-models/models" "$W/models"
date; nvidia-smi --query-gpu=name,memory.total,memory.used,compute_cap --format=csv | tee "$R/gpu.csv"
PYTHONPATH=$W/site python3 -c "import sglang, torch; print('sglang', sglang.__version__, 'torch', torch.__version__)" | tee "$R/versions.txt"
PYTHONPATH=$W/site python3 "$G/refusals.py" --models "$W/models" --out "$R" "$@" 2>&1 | tee "$R/refusals.log"
nvidia-smi --query-gpu=memory.used --format=csv | tee -a "$R/gpu.csv"
date
