#!/usr/bin/env bash
# Starts, or resumes after any interruption, the training run of a config, in the background at
# nice 19 so it yields to everything else on the machine. Idempotent: when the run is already
# going it says so and does nothing. Builds the corpus and tokenizer first if they are missing.
#
#   bash tooling/train/run.sh [tooling/train/configs/kvasir-mini-v1.json]
#
# Output: tooling/train/runs/<name>/{train.log,log.jsonl,ckpt.pt,train.pid}.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
config="${1:-$here/configs/kvasir-mini-v1.json}"
config="$(cd "$(dirname "$config")" && pwd)/$(basename "$config")"
py=/usr/bin/python3 # Debian's python3 with python3-torch; a pyenv python3 on PATH has no torch
name="$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["name"])' "$config")"
run_dir="$here/runs/$name"
pid_file="$run_dir/train.pid"
mkdir -p "$run_dir"

if [[ -f "$pid_file" ]]; then
  pid="$(cat "$pid_file")"
  if [[ -r "/proc/$pid/cmdline" ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "train.py --config $config"; then
    echo "run $name is already going (pid $pid); log: $run_dir/train.log"
    exit 0
  fi
fi

data="$repo/tooling/train/data"
if [[ ! -f "$data/train.bin" || ! -f "$data/heldout.bin" ]]; then
  echo "building the corpus and tokenizer into $data"
  "$py" "$here/prepare_corpus.py" --out "$data"
  if [[ ! -f "$repo/packages/model/dist/index.js" ]]; then
    (cd "$repo" && pnpm --filter @kvasir/model... build)
  fi
  node "$here/train_tokenizer.mjs" --data "$data"
fi

cd "$repo"
setsid nohup nice -n 19 "$py" "$here/train.py" --config "$config" --resume \
  >>"$run_dir/train.log" 2>&1 </dev/null &
echo $! >"$pid_file"
echo "started run $name (pid $!); log: $run_dir/train.log; progress: $run_dir/log.jsonl"
