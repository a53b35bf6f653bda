#!/usr/bin/env bash
# The KV-compression quality table: token-level KV compression on the trained model (kvasir-mini, the
# default model, context 512), after StreamingLLM's Table 1. Every row is `kvasir eval` over the
# same held-out text, read as ONE sequence through the engine's scheduler and the policy (one
# decode step per token: StreamingLLM's protocol), so the text runs far past the context where
# the policy allows. Budgets are 25% and 50% of the context (128 and 256 tokens).
#
#   bash tooling/eval/kv-compression.sh [tokens=4096] [backend=wasm] > kv-compression.jsonl
#
# Rows (each prints one JSON line, the eval report plus `row` and `group`):
#   full      the full cache within the context: sliding windows of 512, stride 256 (the
#             baseline; nothing uncompressed can run past 512 positions)
#   blocks16  window, sinks (one 16-token block), h2o and snapkv at both budgets, block size 16
#   tokens1   the sinks sweep S = 0 (window alone), 1, 2, 4, 8 at block size 1 (token-exact, as
#             StreamingLLM keeps S tokens), at both budgets
#   original  sinks with original positions vs cache positions, on the first 512 tokens (original
#             positions cannot pass the context)
#   small     windows of 16, 32 and 64 tokens with and without 4 sinks (block size 1): where a
#             window alone should break a model that leans on attention sinks
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
tokens="${1:-4096}"
backend="${2:-wasm}"
heldout="$root/tooling/train/data/heldout.txt"
[[ -f "$heldout" ]] || { echo "no $heldout: run tooling/train/prepare_corpus.py first" >&2; exit 1; }
cli="$root/apps/kvasir/dist/cli.js"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Tokenizing the whole held-out file per row is slow: keep a prefix with room to spare.
head -c $((tokens * 8)) "$heldout" > "$work/text.txt"
text="$work/text.txt"
common=(eval -f "$text" --max-tokens "$tokens" --backend "$backend" --kv-dtype f16 --json --no-progress)

emit() { # group row -- eval args...
  local group="$1" row="$2"
  shift 3
  node "$cli" "${common[@]}" "$@" |
    node -e "const r=JSON.parse(require('fs').readFileSync(0,'utf8'));console.log(JSON.stringify({group:'$group',row:'$row',...r}))"
}

emit full full -- --ctx 512 --stride 256 --reference-kv-dtype none
for budget in 128 256; do
  emit blocks16 "window $budget" -- --block-size 16 --kv-compression "window:window=$budget"
  emit blocks16 "sinks 16 + window $((budget - 16))" -- --block-size 16 --kv-compression "sinks:sinks=16,window=$((budget - 16))"
  emit blocks16 "h2o $budget" -- --block-size 16 --kv-compression "h2o:budget=$budget"
  emit blocks16 "snapkv $budget (prompt 496)" -- --block-size 16 --prompt-tokens 496 --kv-compression "snapkv:budget=$budget,observation=32"
  emit tokens1 "window $budget" -- --block-size 1 --kv-compression "window:window=$budget"
  for s in 1 2 4 8; do
    emit tokens1 "sinks $s + window $((budget - s))" -- --block-size 1 --kv-compression "sinks:sinks=$s,window=$((budget - s))"
  done
done
for positions in cache original; do
  emit original "sinks 4 + window 124, $positions positions" -- --block-size 1 --max-tokens 512 \
    --kv-compression "sinks:sinks=4,window=124,positions=$positions"
done
for w in 16 32 64; do
  emit small "window $w" -- --block-size 1 --kv-compression "window:window=$w"
  emit small "sinks 4 + window $((w - 4))" -- --block-size 1 --kv-compression "sinks:sinks=4,window=$((w - 4))"
done
