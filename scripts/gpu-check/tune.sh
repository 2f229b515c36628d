#!/bin/bash
# deploytool tune --local on the GPU harness (docs/tune.md, "On a GPU"): unpack and preflight
# through run.sh (no plan), then the search, its report folder copied to $OUT.
#   PROFILE (default gpu-check-qwen3-tiny), SPACE (a file beside this script, default
#   tune-space.yaml), TOTAL_S (the call's seconds), PREP_S (run.sh's bound), RESUME=1: go on from
#   the journal a previous call on this warm machine left in /tmp/gpu-check/tune-PROFILE;
#   NO_QUALIFY=1 with QUALIFY_S=20: measure only (the last call qualifies the winner). CARD: the
#   card the candidates are planned for (default h200; the card table knows no H100, so run on an H200).
#   REMEASURE=1: once the search has a winner, the winner and the profile's own launch measured
#   again by sglang.bench_serving at the winner's level (tune_remeasure.py, A B B A), its ratio
#   against tune's interval in $OUT/remeasure.json; set REMEASURE_S (default 200) aside for it.
# A fresh machine has no journal: with RESUME=1, a tune-report.tar.xz beside this script (the one
# a previous call returned) is unpacked as the report folder first. A call returns the report as
# one tarball (a device call brings back only a few files) and the kernel cache as it stands after
# the starts (the candidates' JIT compiles included), to put beside run.sh for the next call.
G=$(cd "$(dirname "$0")" && pwd); W=/tmp/gpu-check
START=$(date +%s)
PROFILE=${PROFILE:-gpu-check-qwen3-tiny}; SPACE=$G/${SPACE:-tune-space.yaml}
REPORT=$W/tune-$PROFILE
BUDGET_S=${PREP_S:-240} bash "$G/run.sh" > "$OUT/prep.log" 2>&1
echo "prep took $(( $(date +%s) - START )) s" >> "$OUT/prep.log"
[ -f "$W/env.sh" ] && source "$W/env.sh"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TVM_FFI_CACHE_DIR=$W/cache/tvm-ffi TRITON_CACHE_DIR=$W/cache/triton
export PYTHONPATH=$W/dt/src:$W/dt/site:$W/site
ARGS=(); [ "${RESUME:-0}" = 1 ] && ARGS+=(--resume) || rm -rf "$REPORT"
if [ "${RESUME:-0}" = 1 ] && [ ! -f "$REPORT/journal.jsonl" ] && [ -f "$G/tune-report.tar.xz" ]; then
  mkdir -p "$REPORT" && tar -xJf "$G/tune-report.tar.xz" -C "$REPORT"
fi
# a call that only measures leaves the winner's qualify to the call that ends the search
[ "${NO_QUALIFY:-0}" = 1 ] && ARGS+=(--no-qualify)
LEFT=$(( ${TOTAL_S:-560} - ($(date +%s) - START) ))
# the budget leaves the winner's qualify start and the copy back inside the call, and ends at
# least 30 s before the timeout: tune's clock starts after its imports, and a visit admitted at
# the budget's last second must still stop its server before the timeout kills the search
QUALIFY_S=$(( ${QUALIFY_S:-110} > 30 ? ${QUALIFY_S:-110} : 30 ))
[ "${REMEASURE:-0}" = 1 ] && QUALIFY_S=$(( QUALIFY_S + ${REMEASURE_S:-200} ))
cd "$W" && timeout $((LEFT - 15)) python3 -m deploytool tune --profile "$PROFILE" \
  --profiles-dir "$W/dt/gpu-check/profiles" --local --card "${CARD:-h200}" --space "$SPACE" \
  --report "$REPORT" --budget "$((LEFT - 15 - QUALIFY_S))s" --json "${ARGS[@]}" > "$OUT/tune.json" 2> "$OUT/tune.log"
echo "tune exit $? after $(( $(date +%s) - START )) s" >> "$OUT/tune.log"
if [ "${REMEASURE:-0}" = 1 ] && python3 -c "import json,sys; sys.exit(0 if json.load(open('$OUT/tune.json')).get('ratio_to_base') else 1)"; then
  timeout $(( ${TOTAL_S:-560} - ($(date +%s) - START) - 10 )) python3 "$G/tune_remeasure.py" "$PROFILE" \
    "$W/dt/gpu-check/profiles" "$OUT/tune.json" "$OUT/remeasure.json" > "$OUT/remeasure.log" 2>&1
  echo "remeasure exit $? after $(( $(date +%s) - START )) s" >> "$OUT/tune.log"
fi
tar -C "$REPORT" -cJf "$OUT/tune-report.tar.xz" . && tar -tvJf "$OUT/tune-report.tar.xz" >> "$OUT/tune.log" 2>&1
[ -d "$W/cache" ] && tar -C "$W/cache" -cf - . | xz -6 -T0 > "$OUT/kernel-cache.tar.xz"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv >> "$OUT/tune.log" 2>&1
