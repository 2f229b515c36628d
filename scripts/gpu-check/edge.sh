#!/bin/bash
# The memory plan's upper edge on the lent card (docs/measured/h200-upper-edge.md): unpack the
# overlay and the model folders as run.sh does, then edge.py; results in $OUT (or RESULTS_DIR).
#   bash .gpu/edge.sh [--only ID,...]        BUDGET_S: seconds for everything (default 540)
set -u
G=$(cd "$(dirname "$0")" && pwd)
W=/tmp/gpu-check
R=${OUT:-${RESULTS_DIR:-$W/out}}
START=$(date +%s); BUDGET=${BUDGET_S:-540}
mkdir -p "$W" "$R"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TVM_FFI_CACHE_DIR=$W/cache/tvm-ffi TRITON_CACHE_DIR=$W/cache/triton GPU_CHECK_WORK=$W
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$NVCC" ] && export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$NVCC")")")}
unpack() { [ -f "$2/.ok" ] || { mkdir -p "$2" && tar -xJf "$1" -C "$2" && touch "$2/.ok"; }; }
unpack "$G/overlay.tar.xz" "$W/site" & unpack "$G/models.tar.xz" "$W/unpacked-models" &
[ -f "$G/kernel-cache.tar.xz" ] && { mkdir -p "$W/cache" && tar -xJf "$G/kernel-cache.tar.xz" -C "$W/cache"; } &
wait
[ -d "$W/models" ] || mv "$W/unpacked-models/models" "$W/models"
nvidia-smi --query-gpu=name,memory.total,memory.used,memory.free,compute_cap --format=csv | tee "$R/gpu.csv"
PYTHONPATH=$W/site python3 -c "import sglang, torch; print('sglang', sglang.__version__, 'torch', torch.__version__)" | tee "$R/versions.txt"
PYTHONPATH=$W/site python3 "$G/edge.py" --models "$W/models" --out "$R" --deadline $((START + BUDGET - 15)) "$@" 2>&1 | tee "$R/edge.log"
( cd "$R" && tar -cf - logs | xz -6 -T0 > logs.tar.xz && rm -rf logs )
# the compiled kernels, for the next call (put beside edge.sh as kernel-cache.tar.xz)
[ -d "$W/cache" ] && tar -C "$W/cache" -cf - . | xz -1 -T0 > "$R/kernel-cache.tar.xz"
date
