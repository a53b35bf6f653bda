#!/usr/bin/env bash
# GGUF architectures besides llama-on-Llama, checked against llama.cpp: a tiny random qwen2
# (QKV bias, rope theta 1e6 from the file, untied and tied, Qwen2's byte-level BPE vocabulary
# and ChatML template), a Mistral-style file (architecture llama, untied, Llama 2's
# SentencePiece vocabulary, the [INST] template) and the same as mistral3 (Ministral 3's YaRN
# RoPE and attention temperature scaling), written by @kvasir/model's own converter
# (write-arch-fixtures.ts; the tests rebuild the same bytes, so no GGUF is committed). Beside
# each, arch/<name>.json: the file's SHA-256, the conversation, the prompt the file's chat
# template renders from it with Python's jinja2 as transformers' apply_chat_template does
# (trim_blocks, lstrip_blocks), and llama-greedy on the file with that prompt (no bos added:
# the template writes its own): prompt tokens, 32 greedy tokens, margins, first logits.
# The family fixtures (qwen3, smollm3, gemma3, qwen3moe, phi4-mini) are also quantized by llama-quantize (F16, Q8_0, Q4_K_M):
# per type, each tensor's GGML type and the SHA-256 of its bytes (the tests rebuild the file
# with @kvasir/quantizer and those types, and check the bytes), llama-greedy on the quantized
# file, and on its weights dequantized to F32 by gguf-py (dequantize_gguf.py): llama.cpp's
# arithmetic on exactly the weights Kvasir decodes.
#
#   tooling/llama.cpp/build.sh && /usr/bin/python3 tooling/ggml-fixtures/make_tokenizer_fixtures.py
#   tooling/ggml-fixtures/make_arch_fixtures.sh    # PYTHON: a python3 with numpy and jinja2
#   ONLY=tiny-qwen3moe tooling/ggml-fixtures/make_arch_fixtures.sh   # one fixture's record only
#   ONLY=tiny-qwen3moe SEED=7 OUT_DIR=/tmp/try tooling/ggml-fixtures/make_arch_fixtures.sh
#                             # another seed, recorded elsewhere (searching for clear margins)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="$root/tooling/llama.cpp/build/bin"
out="${OUT_DIR:-$here/arch}"
for tool in llama-greedy llama-quantize; do
  [[ -x "$bin/$tool" ]] || { echo "missing $bin/$tool: run tooling/llama.cpp/build.sh" >&2; exit 1; }
done

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out"
(cd "$root/packages/model" && pnpm exec tsx "$here/write-arch-fixtures.ts" "$tmp" \
  ${ONLY:+"--only=$ONLY"} ${SEED:+"--seed=$SEED"})
"${PYTHON:-python3}" - "$tmp" "$out" "$bin" "$root/tooling/llama.cpp/src/gguf-py" "$here" <<'PY'
import hashlib, json, subprocess, sys
from pathlib import Path
tmp, out, bin_dir, gguf_py, here = sys.argv[1:6]
greedy = f"{bin_dir}/llama-greedy"

sys.path.insert(0, gguf_py)
from gguf import GGUFReader
from jinja2.sandbox import ImmutableSandboxedEnvironment

def raise_exception(message):
    raise ValueError(message)

env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
env.globals["raise_exception"] = raise_exception
for fx in json.load(open(f"{tmp}/fixtures.json")):
    f = GGUFReader(fx["path"]).fields
    tokens = f["tokenizer.ggml.tokens"].contents()
    tok = lambda key: tokens[f[key].contents()] if key in f else ""
    prompt = env.from_string(f["tokenizer.chat_template"].contents()).render(
        messages=fx["messages"], add_generation_prompt=True,
        bos_token=tok("tokenizer.ggml.bos_token_id"), eos_token=tok("tokenizer.ggml.eos_token_id"))
    run = json.loads(subprocess.run([greedy, fx["path"], prompt, "32", "0"], check=True,
                                    capture_output=True).stdout)
    record = {"name": fx["name"], "sha256": fx["sha256"], "messages": fx["messages"],
              "prompt": prompt, "llama_cpp": run}
    if "f32_path" in fx:
        # Experts shipped in blocks (gpt-oss's MXFP4): llama.cpp also on those blocks decoded to
        # f32, its arithmetic on exactly the weights Kvasir decodes.
        deq = f"{tmp}/{fx['name']}-deq.gguf"
        subprocess.run([sys.executable, f"{here}/dequantize_gguf.py", fx["f32_path"], fx["path"],
                        deq], check=True)
        record["dequantized_f32"] = json.loads(subprocess.run(
            [greedy, deq, prompt, "32", "0"], check=True, capture_output=True).stdout)
    quantized = {}
    for q in fx["quantized"]:
        qpath = f"{tmp}/{fx['name']}-{q}.gguf"
        subprocess.run([f"{bin_dir}/llama-quantize", fx["path"], qpath, q, "1"], check=True,
                       capture_output=True)
        tensors = {t.name: [t.tensor_type.name, hashlib.sha256(t.data.tobytes()).hexdigest()]
                   for t in GGUFReader(qpath).tensors}
        qrun = json.loads(subprocess.run([greedy, qpath, prompt, "32", "0"], check=True,
                                         capture_output=True).stdout)
        deq = f"{tmp}/{fx['name']}-{q}-deq.gguf"
        subprocess.run([sys.executable, f"{here}/dequantize_gguf.py", fx["path"], qpath, deq],
                       check=True)
        drun = json.loads(subprocess.run([greedy, deq, prompt, "32", "0"], check=True,
                                         capture_output=True).stdout)
        quantized[q] = {"tensors": tensors, "llama_cpp": {"quantized": qrun, "dequantized_f32": drun}}
        agree = sum(a == b for a, b in zip(qrun["tokens"], drun["tokens"]))
        print(f"  {q}: smallest margin {min(qrun['margins']):.4f}, {agree}/32 tokens as on its "
              f"f32 weights, tokens {qrun['tokens']}")
    if quantized:
        record["quantized"] = quantized
    Path(out, f"{fx['name']}.json").write_text(json.dumps(record, ensure_ascii=False, indent=1))
    print(f"{fx['name']}: {len(run['prompt_tokens'])} prompt tokens, smallest margin "
          f"{min(run['margins']):.4f}, tokens {run['tokens']}")
PY
