#!/bin/bash
# deploytool tune --local on the GPU harness (docs/tune.md, "On a GPU"): unpack and preflight
# through run.sh (no plan), then the search, its report folder copied to $OUT.
G=$(cd "$(dirname "$0")" && pwd); W=/tmp/gpu-check
START=$(date +%s)
BUDGET_S=${PREP_S:-240} bash "$G/run.sh" > "$OUT/prep.log" 2>&1
echo "prep took $(( $(date +%s) - START )) s" >> "$OUT/prep.log"
[ -f "$W/env.sh" ] && source "$W/env.sh"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TVM_FFI_CACHE_DIR=$W/cache/tvm-ffi TRITON_CACHE_DIR=$W/cache/triton
export PYTHONPATH=$W/dt/src:$W/dt/site:$W/site
LEFT=$(( ${TOTAL_S:-560} - ($(date +%s) - START) ))
cd "$W" && timeout $((LEFT - 15)) python3 -m deploytool tune --profile gpu-check-qwen3-tiny \
  --profiles-dir "$W/dt/gpu-check/profiles" --local --card h200 --space "$G/tune-space.yaml" \
  --report "$OUT/tune" --budget "$((LEFT - 110))s" --json > "$OUT/tune.json" 2> "$OUT/tune.log"
echo "tune exit $? after $(( $(date +%s) - START )) s" >> "$OUT/tune.log"
rm -f "$OUT"/tune/logs/*.log.gz; ls -la "$OUT" "$OUT/tune" >> "$OUT/tune.log" 2>&1
