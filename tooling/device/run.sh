#!/usr/bin/env bash
# Runs on the lent GPU machine (through the device tool, with `.devkit` carried; see pack.sh):
# the kernels' correctness check at serving shapes, then the attention, quantizer and model
# benchmarks, each printing JSON. Everything is also written under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
kit=.devkit
out=${OUT:-/tmp/out}
mkdir -p "$out"
for f in "$kit"/deb/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
[ -f "$VK_DRIVER_FILES" ] || unset VK_DRIVER_FILES
gunzip -c "$kit/dawn.node.gz" >"$kit/node_modules/webgpu/dist/linux-x64/dawn.node"
node=node
unxz() { # <file.xz> <out>: xz where the image has it, else Python's lzma
  if command -v xz >/dev/null; then xz -dc "$1" >"$2"; else
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"
  fi
}
command -v node >/dev/null || { unxz "$kit/node.xz" /tmp/node && chmod +x /tmp/node && node=/tmp/node; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$out/gpu.txt"
export KVASIR_ATTENTION_KERNELS=$PWD/$kit/attention-kernels.mjs
steps=${STEPS:-check attention quantizer model offload offload_inline}
step() { # <name> <timeout s> <script> [args...]
  local name=$1 t=$2
  shift 2
  [[ " $steps " == *" $name "* ]] || return 0
  echo "== $name"
  timeout "$t" "$node" "$kit/$@" >"$out/$name.json" 2>"$out/$name.err"
  echo "rc=$? $(tail -c 3000 "$out/$name.json")"
  tail -5 "$out/$name.err"
}
step check "${CHECK_S:-120}" attention-check.mjs
step attention "${ATTN_S:-150}" attention-bench.mjs --json
step quantizer "${QUANT_S:-150}" quantizer-bench.mjs --json
step model "${MODEL_S:-90}" model-bench.mjs --json
(
  export REDIS_SERVER=$PWD/$kit/redis/redis-server LD_LIBRARY_PATH=$PWD/$kit/redis
  step offload "${OFFLOAD_S:-120}" offload-bench.mjs --json
  # The same with the checksums on the calling thread: what the worker threads buy on many cores.
  BENCH_CHECKSUM_THREADS=0 step offload_inline "${OFFLOAD_S:-120}" offload-bench.mjs --json
)
