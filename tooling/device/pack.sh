#!/usr/bin/env bash
# Packs what a lent GPU machine needs into .devkit/ (git-ignored; carried by the device tool):
# the benchmarks bundled into single files, Dawn's linux-x64 binary, this machine's node, and
# the Vulkan/EGL loaders (the device image has the NVIDIA driver but maybe not the loaders).
# Then `tooling/device/run.sh` runs there. Build the packages first (`pnpm build`).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
kit="$root/.devkit"
rm -rf "$kit" && mkdir -p "$kit/node_modules/webgpu/dist/linux-x64" "$kit/deb"
grep -qx '/.devkit/' "$root/.git/info/exclude" 2>/dev/null || echo '/.devkit/' >>"$root/.git/info/exclude"
esbuild=$(ls -d "$root"/node_modules/.pnpm/esbuild@*/node_modules/esbuild/bin/esbuild | tail -1)
bundle() { # <package dir> <entry> <out name>
  (cd "$root/$1" && "$esbuild" "$2" --bundle --platform=node --format=esm --target=node20 \
    --external:webgpu --log-level=warning --banner:js="import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" --outfile="$kit/$3.mjs")
}
bundle packages/attention-kernels bench/index.ts attention-bench
bundle packages/attention-kernels bench/device-check.ts attention-check
bundle packages/quantizer bench/index.ts quantizer-bench
bundle packages/model bench/index.ts model-bench
bundle packages/offload bench/index.ts offload-bench
# The offload benchmark starts its own redis-server: this machine's binary and the libraries a
# CUDA image may lack. PACK_OFFLOAD=0 leaves them out (3 MB) when only the GPU steps will run.
if [ "${PACK_OFFLOAD:-1}" != 0 ]; then
  mkdir -p "$kit/redis"
  cp "$(readlink -f "$(command -v redis-server)")" "$kit/redis/redis-server"
  for lib in liblzf.so.1 libjemalloc.so.2 libatomic.so.1; do
    cp "$(ldconfig -p | awk -v l="$lib" '$1 == l && /x86-64/ { print $NF; exit }')" "$kit/redis/"
  done
fi
# The quantizer benchmark loads the kernels by path (KVASIR_ATTENTION_KERNELS in run.sh).
bundle packages/attention-kernels dist/index.js attention-kernels
w=$(ls -d "$root"/node_modules/.pnpm/webgpu@*/node_modules/webgpu | tail -1)
cp "$w/index.js" "$w/package.json" "$kit/node_modules/webgpu/"
gzip -1 -c "$w/dist/linux-x64/dawn.node" >"$kit/dawn.node.gz"
# xz, not gzip: node is 99 MB, 24 MB as xz against 39 MB as gzip, and the checkout (31 MB of
# tracked files) travels with the kit under the device tool's 64 MiB (about 90 s on 2 cores).
xz -9 -T2 -c "$(readlink -f "$(command -v node)")" >"$kit/node.xz"
(
  cd "$kit/deb"
  o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  mkdir -p /tmp/amd64/partial
  apt-get $o update -qq >/dev/null
  apt-get $o download -qq libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 >/dev/null
)
du -sh "$kit"
