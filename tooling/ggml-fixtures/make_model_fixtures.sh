#!/usr/bin/env bash
# A tiny random Llama (one layer, widths 256, vocab 320, written by @kvasir/model) quantized by
# llama.cpp's own llama-quantize to Q4_K_M, Q5_K_M, Q6_K and Q4_0 (a few hundred KB each), and
# beside each file a JSON of what llama.cpp makes of it, for Kvasir's tests:
#   - "quantized": llama-greedy on the file (llama.cpp's CPU backend, which quantizes the
#     activations for its dot products): prompt tokens, 32 greedy tokens, each step's top-1
#     minus top-2 logit, and the logits after the prompt;
#   - "dequantized_f32": the same on the file's weights dequantized to F32 (dequantize_gguf.py):
#     llama.cpp's arithmetic on exactly the weights Kvasir decodes;
#   - "tensors": name, GGML type and shape of each tensor;
#   - "kvasir_requantized": per quantized tensor, how many blocks @kvasir/quantizer's reference
#     quantizers make differently from llama-quantize, from the F32 weights (check-quantize.mjs).
#
#   tooling/llama.cpp/build.sh && pnpm --filter @kvasir/model... build && pnpm --filter @kvasir/quantizer build
#   tooling/ggml-fixtures/make_model_fixtures.sh [outdir]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="$root/tooling/llama.cpp/build/bin"
out="${1:-$here/models}"
# On this model and prompt llama.cpp's greedy tokens on the quantized files and on their
# dequantized weights agree for all 32 steps (its activation quantization moves logits by up to
# ~0.04; other prompts have steps closer to a tie than that).
prompt="${PROMPT:-Hello, world!}"
py=/usr/bin/python3
for tool in llama-quantize llama-greedy; do
  [[ -x "$bin/$tool" ]] || { echo "missing $bin/$tool: run tooling/llama.cpp/build.sh" >&2; exit 1; }
done

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out"
node "$here/write-tiny-llama.mjs" "$tmp/f32.gguf" >/dev/null
"$py" "$here/dump_gguf.py" "$tmp/f32.gguf" "$tmp/f32.dump"
for q in Q4_K_M Q5_K_M Q6_K Q4_0; do
  file="$out/tiny-llama-$q.gguf"
  "$bin/llama-quantize" "$tmp/f32.gguf" "$file" "$q" 1 > "$tmp/quantize.log" 2>&1 \
    || { cat "$tmp/quantize.log" >&2; exit 1; }
  "$bin/llama-greedy" "$file" "$prompt" 32 > "$tmp/quantized.json"
  "$py" "$here/dequantize_gguf.py" "$tmp/f32.gguf" "$file" "$tmp/deq.gguf"
  "$bin/llama-greedy" "$tmp/deq.gguf" "$prompt" 32 > "$tmp/deq.json"
  "$py" "$here/dump_gguf.py" "$file" "$tmp/q.dump"
  node "$here/check-quantize.mjs" "$tmp/f32.dump" "$tmp/q.dump" > "$tmp/check.json"
  "$py" - "$prompt" "$q" "$tmp" > "$out/tiny-llama-$q.json" <<'PY'
import json, sys
prompt, q, tmp = sys.argv[1:4]
load = lambda name: json.load(open(f"{tmp}/{name}"))
tensors = [{k: t[k] for k in ("name", "type", "shape")} for t in load("q.dump/manifest.json")]
requant = [{k: t[k] for k in ("name", "type", "blocks", "differingBlocks")}
           for t in load("check.json") if t["compared"]]
print(json.dumps({"prompt": prompt, "ftype": q, "tensors": tensors,
                  "llama_cpp": {"quantized": load("quantized.json"),
                                "dequantized_f32": load("deq.json")},
                  "kvasir_requantized": requant}, indent=1))
PY
  rm -rf "$tmp/q.dump"
done
ls -l "$out"
