#!/usr/bin/env bash
# Builds llama.cpp's CPU tools (llama-quantize, llama-simple, llama-bench, llama-cli, and
# llama-greedy and llama-tokenize-json from greedy.cpp and tokenize-json.cpp beside this script) from the
# llama.cpp source that the npm package node-llama-cpp bundles (a git bundle in its tarball), so
# the version is pinned by one npm version and needs no GitHub access. Idempotent: an existing
# source checkout and CMake cache are reused, and `cmake --build` only rebuilds what changed.
#
#   tooling/llama.cpp/build.sh                 # everything below
#   JOBS=1 tooling/llama.cpp/build.sh          # fewer compile jobs on a busy machine
#   LLAMA_TARGETS="llama-quantize" tooling/llama.cpp/build.sh
#
# Output: tooling/llama.cpp/build/bin/ (gitignored, as is tooling/llama.cpp/src).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="${NODE_LLAMA_CPP_VERSION:-3.22.1}"
src="$here/src"
build="$here/build"
jobs="${JOBS:-2}"
# Quantize and simple first: the model fixtures need only those two.
targets="${LLAMA_TARGETS:-llama-quantize llama-simple llama-bench llama-cli}"

if [[ ! -f "$src/.node-llama-cpp-$version" ]]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent "node-llama-cpp@$version" >/dev/null && tar xzf node-llama-cpp-*.tgz)
  bundle="$tmp/package/llama/gitRelease.bundle"
  [[ -f "$bundle" ]] || { echo "no llama.cpp git bundle in node-llama-cpp@$version" >&2; exit 1; }
  rm -rf "$src"
  git clone --quiet "$bundle" "$src"
  cp "$tmp/package/llama/llama.cpp.info.json" "$src/.node-llama-cpp-info.json"
  touch "$src/.node-llama-cpp-$version"
fi

if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S "$src" -B "$build" \
    -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
    -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF
fi

# llama-greedy and llama-tokenize-json need only the llama library: built first, linked against
# the static libraries.
cmake --build "$build" --config Release --target llama -j "$jobs"
for tool in greedy tokenize-json; do
  exe="$build/bin/llama-$tool"
  if [[ ! -x "$exe" || "$here/$tool.cpp" -nt "$exe" ]]; then
    mkdir -p "$build/bin"
    g++ -O2 -std=c++17 "$here/$tool.cpp" -I"$src/include" -I"$src/ggml/include" \
      "$build/src/libllama.a" "$build/ggml/src/libggml.a" "$build/ggml/src/libggml-cpu.a" \
      "$build/ggml/src/libggml-base.a" -fopenmp -lpthread -lm -o "$exe"
  fi
done

for target in $targets; do
  cmake --build "$build" --config Release --target "$target" -j "$jobs"
done
ls -1 "$build/bin"
