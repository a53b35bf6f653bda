#!/usr/bin/env bash
# Table 1, KV-format quality: the KV formats on the trained model (kvasir-mini, the default model),
# the way llama.cpp reports its KV-quantization measurements: for each --kv-dtype, KV bytes per
# token, perplexity, delta-PPL and mean KL divergence against f16, and top-1 agreement, at a
# short and at the full (512) context. Runs `kvasir eval` (the real paged forward pass) on the
# held-out text; the f16 run's logits are saved once per context and every other format is
# compared with them.
#
#   bash tooling/eval/kv-formats.sh [tokens=4096] [backend=wasm] > kv-formats.jsonl
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
tokens="${1:-4096}"
backend="${2:-wasm}"
text="$root/tooling/train/data/heldout.txt"
[[ -f "$text" ]] || { echo "no $text: run tooling/train/prepare_corpus.py first" >&2; exit 1; }
cli="$root/apps/kvasir/dist/cli.js"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for ctx in 128 512; do
  stride=$((ctx / 2))
  common=(eval -f "$text" --max-tokens "$tokens" --ctx "$ctx" --stride "$stride" --backend "$backend" --json --no-progress)
  node "$cli" "${common[@]}" --kv-dtype f16 --reference-kv-dtype none --save-logits "$work/f16-$ctx.json" \
    | node -e "const r=JSON.parse(require('fs').readFileSync(0,'utf8'));console.log(JSON.stringify({ctx:$ctx,kv_dtype:'f16',...r}))"
  for dtype in f32 int8 int8-h8 fp8-e4m3 fp8-e5m2 int4 int4-h32; do
    node "$cli" "${common[@]}" --kv-dtype "$dtype" --reference "$work/f16-$ctx.json" \
      | node -e "const r=JSON.parse(require('fs').readFileSync(0,'utf8'));console.log(JSON.stringify({ctx:$ctx,kv_dtype:'$dtype',...r}))"
  done
done
