#!/usr/bin/env bash
# A model past one 4 GiB WebAssembly memory on Kvasir's wasm backend, against llama.cpp on the
# same file: a seeded random model of Qwen2.5-7B's shape in Q4_K_M (4.7 GB, make-random-7b.ts),
# split over two wasm memories by the placement `kvasir serve --backend wasm` chooses. Not for
# CI (the file is 4.7 GB). Needs build.sh's llama-bench and llama-greedy.
#
#   tooling/llama.cpp/compare-wasm-7b.sh                      # .kvasir-cache/, 2 threads, 3 rounds, 16 tokens
#   GGUF=/path/big.gguf THREADS=2 ROUNDS=3 TG=16 GREEDY=8 tooling/llama.cpp/compare-wasm-7b.sh
#
# First greedy tokens: llama-greedy (one thread) and Kvasir's split model from the same prompt
# token ids; then decode (tg) alternating llama-bench and Kvasir, each round with the load
# average beside it. Prints one JSON object.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
threads="${THREADS:-2}"
rounds="${ROUNDS:-3}"
tg="${TG:-16}"
greedy_n="${GREEDY:-8}"
prompt="${PROMPT:-The quick brown fox}"
bin="${LLAMA_BIN:-$here/build/bin}"
gguf="${GGUF:-$root/.kvasir-cache/random-qwen2.5-7b-Q4_K_M.gguf}"
tsx="$root/packages/model/node_modules/.bin/tsx"
for tool in llama-bench llama-greedy; do
  [[ -x "$bin/$tool" ]] || { echo "no $bin/$tool: $here/build.sh" >&2; exit 1; }
done
if [[ ! -f "$gguf" ]]; then
  mkdir -p "$(dirname "$gguf")"
  "$tsx" "$here/make-random-7b.ts" "$gguf" >&2
fi
(cd "$root/packages/model" && node scripts/build-wasm.mjs) >&2

# llama-greedy's JSON carries the first step's logits (the whole vocabulary): a file, not an argument.
llama_greedy="$(mktemp)"
trap 'rm -f "$llama_greedy"' EXIT
"$bin/llama-greedy" "$gguf" "$prompt" "$greedy_n" >"$llama_greedy"
ids="$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).prompt_tokens.join(","))' "$llama_greedy")"
kvasir_greedy="$("$tsx" "$here/kvasir-wasm-greedy.ts" "$gguf" "$threads" "$greedy_n" "$ids")"

rows=()
for ((r = 0; r < rounds; r++)); do
  load="$(cut -d' ' -f1-3 /proc/loadavg)"
  l="$("$bin/llama-bench" -m "$gguf" -p 0 -n "$tg" -t "$threads" -r 1 -o json)"
  k="$("$tsx" "$here/kvasir-wasm-bench.ts" "$gguf" "$threads" 0 "$tg")"
  rows+=("{\"load\":\"$load\",\"llama\":$l,\"kvasir\":$k}")
done

node - "$gguf" "$threads" "$llama_greedy" "$kvasir_greedy" "${rows[@]}" <<'JS'
const [gguf, threads, lg, kg, ...rows] = process.argv.slice(2);
const llama = JSON.parse(require('node:fs').readFileSync(lg, 'utf8'));
const kvasir = JSON.parse(kg);
const runs = rows.map((r) => JSON.parse(r));
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const llamaTg = runs.map((r) => r.llama.find((t) => t.n_gen > 0).avg_ts);
const kvTg = runs.map((r) => r.kvasir.tg_tok_s);
console.log(JSON.stringify({
  gguf, threads: Number(threads),
  greedy: {
    prompt_tokens: llama.prompt_tokens,
    llama_cpp: llama.tokens, kvasir_wasm: kvasir.tokens,
    equal: JSON.stringify(llama.tokens) === JSON.stringify(kvasir.tokens),
    llama_margins: llama.margins, kvasir_margins: kvasir.margins,
    kvasir_devices: kvasir.devices,
  },
  rounds: runs.map((r, i) => ({ load: r.load, llama_cpp_tg: llamaTg[i], kvasir_tg: kvTg[i],
    kvasir_rss_bytes: r.kvasir.rss_bytes, kvasir_load_s: r.kvasir.load_s, kvasir_devices: r.kvasir.devices })),
  decode_vs_llama_cpp: median(kvTg) / median(llamaTg),
}, null, 2));
JS
