#!/usr/bin/env bash
# The serving comparison: the same GGUF behind `kvasir serve` (wasm backend) and llama.cpp's
# `llama-server` on the same machine, the same thread count, in the same window, alternating
# rounds. Each round starts one server, warms it with one short request, sends CONCURRENCY
# greedy requests at once (NEW_TOKENS new tokens each, EOS ignored) and then one request alone,
# and stops it; then the other server does the same. Not for CI. Needs
# tooling/llama.cpp/build.sh's llama-server (LLAMA_TARGETS=llama-server) and the built CLI
# (pnpm turbo run build --filter=kvasir).
#
#   tooling/llama.cpp/compare-serve.sh                        # Q4_K_M, 2 threads, 8 streams, 2 rounds
#   THREADS=1 ROUNDS=3 tooling/llama.cpp/compare-serve.sh
#   DTYPE=Q8_0 tooling/llama.cpp/compare-serve.sh             # made with llama-quantize if missing
#   GGUF=path/to/model.gguf CONCURRENCY=4 NEW_TOKENS=128 tooling/llama.cpp/compare-serve.sh
#   OMP_WAIT_POLICY=PASSIVE tooling/llama.cpp/compare-serve.sh  # on a machine other jobs share
#
# LLAMA_BIN_DIR names another llama.cpp build's bin/ (default: build.sh's). KVASIR_ARGS and
# LLAMA_SERVER_ARGS go to each server as they are. Servers are always stopped,
# also on failure or Ctrl-C. Prints one JSON object: each round's aggregate tokens/s of the
# concurrent requests and of the one alone on both servers, the load average before each
# round, and the ratios the serving goals are stated in (Kvasir's aggregate against
# llama-server's, and against Kvasir's own single stream).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
dtype="${DTYPE:-Q4_K_M}"
threads="${THREADS:-2}"
rounds="${ROUNDS:-2}"
concurrency="${CONCURRENCY:-8}"
new_tokens="${NEW_TOKENS:-64}"
prompt_tokens="${PROMPT_TOKENS:-16}"
read -r -a kvasir_args <<<"${KVASIR_ARGS:-}"
read -r -a llama_args <<<"${LLAMA_SERVER_ARGS:-}"
bin="${LLAMA_BIN_DIR:-$here/build/bin}"
llama_server="$bin/llama-server"
quantize="$bin/llama-quantize"
[[ -x "$llama_server" ]] || { echo "no $llama_server: LLAMA_TARGETS=llama-server $here/build.sh" >&2; exit 1; }
cli="$root/apps/kvasir/dist/cli.js"
[[ -f "$cli" ]] || { echo "no $cli: pnpm turbo run build --filter=kvasir" >&2; exit 1; }
tsx="$root/packages/model/node_modules/.bin/tsx"

gguf="${GGUF:-$root/.kvasir-cache/issue18-110m-$dtype-kv12.gguf}"
if [[ ! -f "$gguf" ]]; then
  mkdir -p "$(dirname "$gguf")"
  f16="$root/.kvasir-cache/issue18-110m-F16-kv12.gguf"
  [[ -f "$f16" ]] || "$tsx" "$here/make-random-gguf.ts" "$f16" F16 12
  if [[ "$dtype" != F16 ]]; then
    [[ -x "$quantize" ]] || { echo "no $quantize to make $gguf: $here/build.sh" >&2; exit 1; }
    "$quantize" "$f16" "$gguf" "$dtype" >/dev/null
  fi
fi

logs="$(mktemp -d)"
server_pid=""
stop_server() {
  if [[ -n "$server_pid" ]]; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
  fi
}
trap 'stop_server; rm -rf "$logs"' EXIT
trap 'exit 130' INT TERM

free_port() {
  node -e 'const s = require("node:net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
}

# Waits until `url`/v1/models answers (the model is loaded), or fails naming the server's log.
wait_ready() {
  local url="$1" log="$2"
  for _ in $(seq 1 600); do
    curl -sf "$url/v1/models" >/dev/null 2>&1 && return 0
    kill -0 "$server_pid" 2>/dev/null || { echo "server exited:" >&2; cat "$log" >&2; exit 1; }
    sleep 0.5
  done
  echo "server not ready after 300 s:" >&2
  cat "$log" >&2
  exit 1
}

start_kvasir() {
  local port
  port="$(free_port)"
  node "$cli" serve --model "$gguf" --host 127.0.0.1 --port "$port" --backend wasm \
    --threads "$threads" --max-num-seqs "$concurrency" ${kvasir_args[@]+"${kvasir_args[@]}"} \
    >"$logs/kvasir.log" 2>&1 &
  server_pid=$!
  url="http://127.0.0.1:$port"
  wait_ready "$url" "$logs/kvasir.log"
}

start_llama() {
  local port
  port="$(free_port)"
  # Room in every slot for the prompt and the new tokens.
  "$llama_server" -m "$gguf" --host 127.0.0.1 --port "$port" -t "$threads" -np "$concurrency" \
    -c $((concurrency * (prompt_tokens + new_tokens + 64))) --no-webui \
    ${llama_args[@]+"${llama_args[@]}"} >"$logs/llama.log" 2>&1 &
  server_pid=$!
  url="http://127.0.0.1:$port"
  wait_ready "$url" "$logs/llama.log"
}

# One round on the running server: a warm-up, the concurrent requests, one request alone.
measure() {
  local seed="$1"
  "$tsx" "$here/serve-load.ts" "$url" 1 8 "$prompt_tokens" $((seed + 1000)) >/dev/null
  batch="$("$tsx" "$here/serve-load.ts" "$url" "$concurrency" "$new_tokens" "$prompt_tokens" "$seed")"
  single="$("$tsx" "$here/serve-load.ts" "$url" 1 "$new_tokens" "$prompt_tokens" $((seed + 500)))"
}

results=()
for ((r = 0; r < rounds; r++)); do
  load="$(cut -d' ' -f1-3 /proc/loadavg)"
  start_kvasir
  measure $((2 * r))
  stop_server
  results+=("{\"loadavg\":\"$load\",\"kvasir\":{\"batch\":$batch,\"single\":$single}")
  start_llama
  measure $((2 * r + 1))
  stop_server
  results[r]+=",\"llama_server\":{\"batch\":$batch,\"single\":$single}}"
done

node - "$gguf" "$threads" "$concurrency" "$new_tokens" "${KVASIR_ARGS:-}" "${LLAMA_SERVER_ARGS:-}" "${results[@]}" <<'JS'
const [gguf, threads, concurrency, newTokens, kvasirArgs, llamaArgs, ...rounds] = process.argv.slice(2);
const runs = rounds.map((s) => JSON.parse(s));
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const series = (who, what) => runs.map((r) => r[who][what].tok_s);
const kb = series('kvasir', 'batch');
const ks = series('kvasir', 'single');
const lb = series('llama_server', 'batch');
const ls = series('llama_server', 'single');
const ratio = (a, b) => +(median(a) / median(b)).toFixed(3);
console.log(JSON.stringify({
  gguf, threads: Number(threads), concurrency: Number(concurrency), new_tokens: Number(newTokens),
  kvasir_args: kvasirArgs, llama_server_args: llamaArgs,
  omp_wait_policy: process.env.OMP_WAIT_POLICY ?? null,
  loadavg: runs.map((r) => r.loadavg),
  kvasir: { batch_tok_s: kb, single_tok_s: ks },
  llama_server: { batch_tok_s: lb, single_tok_s: ls },
  kvasir_batch_vs_llama_server_batch: ratio(kb, lb),
  kvasir_batch_vs_kvasir_single: ratio(kb, ks),
  kvasir_single_vs_llama_server_single: ratio(ks, ls),
  llama_server_batch_vs_single: ratio(lb, ls),
}, null, 2));
JS
