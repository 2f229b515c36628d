#!/bin/bash
# The GPU acceptance harness, GPU side (docs/gpu-check.md): on the GPU host, from the folder
# build.sh made (no network needed), one command:
#
#   bash .gpu/run.sh PLAN [PLAN ...]       PLAN: dense | hybrid-mtp | a3b | a3b-patched | a3b-tuned
#
# Unpacks the overlay, the model folders and deploytool under /tmp/gpu-check, runs the preflight
# (versions, imports, one JIT build), then drive.py for each plan, and leaves in $OUT (or
# RESULTS_DIR) at most 8 files: summary.json, drive.log, preflight.txt, results.tar.xz (every
# report, fixture and log) and kernel-cache.tar.xz (the compiled Triton and tvm-ffi kernels: put
# it beside run.sh as kernel-cache.tar.xz and the next start skips those compiles).
# Knobs: BUDGET_S (seconds for everything, default 540), HOST_FACTS=1 (nvidia-smi, topology,
# the raw NVML dump, deploytool gpus), PATCH_DIR (the series the a3b-patched plan applies to a
# copy of the overlay, default the release's series build.sh put beside this script; the
# overlay itself stays stock between calls).
set -u
G=$(cd "$(dirname "$0")" && pwd)
W=/tmp/gpu-check
R=${OUT:-${RESULTS_DIR:-$W/out}}
START=$(date +%s); BUDGET=${BUDGET_S:-540}; DEADLINE=$((START + BUDGET))
mkdir -p "$W" "$R"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# NVLink multicast stays off (a program that uses it can take a shared host's GPUs down)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TVM_FFI_CACHE_DIR=$W/cache/tvm-ffi TRITON_CACHE_DIR=$W/cache/triton GPU_CHECK_WORK=$W
export PATCH_DIR=${PATCH_DIR:-$G/patches}
say() { echo "[device $(date +%H:%M:%S) +$(( $(date +%s) - START ))s] $*" | tee -a "$R/drive.log"; }
unpack() { [ -f "$2/.ok" ] || { mkdir -p "$2" && tar -xJf "$1" -C "$2" && touch "$2/.ok"; }; }

# a server a previous call left running (its own session) on a machine that stayed warm
if [ -f "$W/server.pids" ]; then
  for pg in $(cat "$W/server.pids"); do kill -KILL -- "-$pg" 2>/dev/null; done; rm -f "$W/server.pids"; sleep 3
fi
say "unpacking"
unpack "$G/overlay.tar.xz" "$W/site" &
unpack "$G/models.tar.xz" "$W/unpacked-models" &
# deploytool and the harness are small and change between calls: always fresh
rm -rf "$W/unpacked-dt" "$W/dt"; unpack "$G/deploytool.tar.xz" "$W/unpacked-dt" &
[ -f "$G/kernel-cache.tar.xz" ] && { mkdir -p "$W/cache" && tar -xJf "$G/kernel-cache.tar.xz" -C "$W/cache"; } &
wait
[ -d "$W/models" ] || mv "$W/unpacked-models/models" "$W/models"
[ -d "$W/dt" ] || mv "$W/unpacked-dt/dt" "$W/dt"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/dt/site" "$W"/dt/wheels/*.whl 2>&1 | tail -2
# wheels pinned after the overlay was packed (build.sh puts them in the overlay itself)
if ls "$G"/extra-wheels/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$W/site" "$G"/extra-wheels/*.whl 2>&1 | tail -2
fi
say "unpacked"

if [ ! -f "$W/preflight.ok" ]; then
  PYTHONPATH=$W/site:$W/dt/src:$W/dt/site timeout 240 python3 "$W/dt/gpu-check/preflight.py" "$W/env.sh" --jit > "$R/preflight.txt" 2>&1
  rc=$?; tail -3 "$R/preflight.txt"
  [ $rc = 0 ] && touch "$W/preflight.ok" || { say "preflight failed ($rc)"; }
fi
[ -f "$W/env.sh" ] && source "$W/env.sh"
say "preflight done"

if [ -f "$W/preflight.ok" ]; then
  ARGS=(); for p in "$@"; do ARGS+=(--plan "$p"); done
  [ "${HOST_FACTS:-0}" = 1 ] && ARGS+=(--host-facts)
  # the deadline leaves time to pack what came back
  PYTHONPATH=$W/dt/src:$W/dt/site:$W/site timeout $((DEADLINE - $(date +%s) - 20)) python3 "$W/dt/gpu-check/drive.py" "${ARGS[@]}" --out "$W/results" \
    --deadline $((DEADLINE - 45)) --site "$W/site" --dt "$W/dt" 2>&1 | tail -c 20000 >> "$R/drive.log"
  say "drive finished"
fi
cp "$W/results/summary.json" "$R/" 2>/dev/null
cp "$W/results/drive.log" "$R/drive-steps.log" 2>/dev/null
cp "$R/preflight.txt" "$W/results/" 2>/dev/null
tar -C "$W" -cf - results | xz -6 -T0 > "$R/results.tar.xz"
# the compiled kernels, for the next start
[ -d "$W/cache" ] && tar -C "$W/cache" -cf - . | xz -6 -T0 > "$R/kernel-cache.tar.xz"
ls -la "$R"
say "device.sh done"
