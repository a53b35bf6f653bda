#!/usr/bin/env bash
# The wasm backend's comparison with llama.cpp: the same GGUF through llama.cpp (llama-bench) and Kvasir's wasm
# backend on the same machine, in the same window, alternating runs, with the same thread
# count. Not for CI. Needs tooling/llama.cpp/build.sh's llama-bench (LLAMA_TARGETS=llama-bench).
#
#   tooling/llama.cpp/compare-wasm.sh                       # F16, MHA, 2 threads, 3 rounds
#   DTYPE=Q8_0 KV_HEADS=4 THREADS=2 ROUNDS=3 tooling/llama.cpp/compare-wasm.sh
#   ARCH=qwen3 DTYPE=Q4_K_M tooling/llama.cpp/compare-wasm.sh  # the same shape as qwen3, smollm3, qwen3moe, gemma3, gpt-oss or phi3
#   ARCH=gpt-oss DTYPE=MXFP4_MOE KV_HEADS=4 tooling/llama.cpp/compare-wasm.sh  # gpt-oss as it ships
#   DTYPE=Q4_K_M tooling/llama.cpp/compare-wasm.sh        # llama-quantize of the F16 file (made
#                                                          # once, LLAMA_TARGETS=llama-quantize)
#   GGUF=path/to/model.gguf LLAMA_BENCH_ARGS="-fa 1" tooling/llama.cpp/compare-wasm.sh
#   OMP_WAIT_POLICY=PASSIVE tooling/llama.cpp/compare-wasm.sh   # on a machine other jobs share
#
# LLAMA_BENCH_ARGS go to llama-bench as they are. build.sh's llama.cpp runs its threads through
# OpenMP, whose waiting threads spin (llama-bench's --poll 0 changed nothing here): on a machine
# other jobs share, a spinning thread holds a core the thread it waits for needs, and tg128 drops
# by 10x or more; OMP_WAIT_POLICY=PASSIVE makes them sleep (figures:
# packages/model/bench/README.md). Node ignores the variable, so Kvasir's side is unchanged.
#
# Prints one JSON object: each round's tg128 / pp512 from both, their medians and the ratios
# the issue sets goals for (decode >= 0.5x, prompt processing >= 0.25x llama.cpp).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
dtype="${DTYPE:-F16}"
kv="${KV_HEADS:-12}"
threads="${THREADS:-2}"
arch="${ARCH:-llama}"
# The llama files keep their old names (caches made before ARCH existed stay valid).
suffix=""
[[ "$arch" == llama ]] || suffix="-$arch"
rounds="${ROUNDS:-3}"
read -r -a llama_args <<<"${LLAMA_BENCH_ARGS:-}"
bench="$here/build/bin/llama-bench"
[[ -x "$bench" ]] || { echo "no $bench: LLAMA_TARGETS=llama-bench $here/build.sh" >&2; exit 1; }
tsx="$root/packages/model/node_modules/.bin/tsx"
gguf="${GGUF:-$root/.kvasir-cache/issue18-110m-$dtype-kv$kv$suffix.gguf}"
mkdir -p "$(dirname "$gguf")"
if [[ ! -f "$gguf" ]]; then
  case "$dtype" in
    F16 | Q8_0) "$tsx" "$here/make-random-gguf.ts" "$gguf" "$dtype" "$kv" "$arch" ;;
    *)
      # Mixtures such as Q4_K_M are llama-quantize's, from the F16 file, as users make them.
      f16="$root/.kvasir-cache/issue18-110m-F16-kv$kv$suffix.gguf"
      [[ -f "$f16" ]] || "$tsx" "$here/make-random-gguf.ts" "$f16" F16 "$kv" "$arch"
      quantize="$here/build/bin/llama-quantize"
      [[ -x "$quantize" ]] || { echo "no $quantize to make $gguf: $here/build.sh" >&2; exit 1; }
      "$quantize" "$f16" "$gguf" "$dtype" >/dev/null
      ;;
  esac
fi
(cd "$root/packages/model" && node scripts/build-wasm.mjs)

llama=()
kvasir=()
for ((r = 0; r < rounds; r++)); do
  llama+=("$("$bench" -m "$gguf" -p 512 -n 128 -t "$threads" -r 1 -o json ${llama_args[@]+"${llama_args[@]}"})")
  kvasir+=("$("$tsx" "$here/kvasir-wasm-bench.ts" "$gguf" "$threads" 512 128)")
done

node - "$arch" "$dtype" "$kv" "$threads" "${LLAMA_BENCH_ARGS:-}" "${#llama[@]}" "${llama[@]}" "${kvasir[@]}" <<'JS'
const [arch, dtype, kv, threads, llamaArgs, n, ...rest] = process.argv.slice(2);
const rounds = Number(n);
const llama = rest.slice(0, rounds).map((s) => JSON.parse(s));
const kvasir = rest.slice(rounds).map((s) => JSON.parse(s));
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
// llama-bench prints one record per test: n_prompt > 0 is pp, n_gen > 0 is tg.
const pick = (runs, f) => runs.map((r) => r.find(f).avg_ts);
const llamaPp = pick(llama, (t) => t.n_prompt > 0 && t.n_gen === 0);
const llamaTg = pick(llama, (t) => t.n_gen > 0 && t.n_prompt === 0);
const kvPp = kvasir.map((r) => r.pp_tok_s);
const kvTg = kvasir.map((r) => r.tg_tok_s);
console.log(JSON.stringify({
  arch, dtype, kv_heads: Number(kv), threads: Number(threads), llama_bench_args: llamaArgs,
  omp_wait_policy: process.env.OMP_WAIT_POLICY ?? null,
  llama_cpp: { pp512: llamaPp, tg128: llamaTg },
  kvasir_wasm: { pp512: kvPp, tg128: kvTg },
  decode_vs_llama_cpp: median(kvTg) / median(llamaTg),
  pp_vs_llama_cpp: median(kvPp) / median(llamaPp),
}, null, 2));
JS
