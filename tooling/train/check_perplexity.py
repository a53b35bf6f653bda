#!/usr/bin/python3
"""Perplexity of an exported model in PyTorch against `kvasir eval` on the same export.

Usage: /usr/bin/python3 tooling/train/check_perplexity.py --model DIR
           [--file tooling/train/data/heldout.txt] [--ctx 512] [--stride 256]
           [--max-tokens N] [--backends cpu,webgpu] [--tolerance 0.005] [--json]

For each backend, runs `node apps/kvasir/dist/cli.js eval` (f32 KV, no reference run) on the
file with the given windows, and writes the token ids it evaluated. PyTorch (model.py, f32, the
weights read from the export's model.safetensors, so f16 rounding is the same on both sides)
then scores the same ids with the same windows: Hugging Face's perplexity with a stride, each
window of `ctx` tokens from position 0 scoring only the tokens the previous window did not, the
first window all but its first token. Prints both perplexities and their relative difference;
exits 1 when a backend differs by more than the tolerance (default 0.5%).

Kvasir's tokenizer gives the ids (the export check compares it with the training tokenizer);
this check is about the forward pass and the windows. Build the workspace first
(`pnpm --filter kvasir... build`).
"""

import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Llama, ModelConfig  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, '..', '..'))
CLI = os.path.join(REPO, 'apps', 'kvasir', 'dist', 'cli.js')


def read_safetensors(path):
    """name -> float32 tensor, from the 8-byte header length, JSON header and raw data."""
    with open(path, 'rb') as f:
        (n,) = struct.unpack('<Q', f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == '__metadata__':
            continue
        dtype = {'F16': '<f2', 'F32': '<f4', 'BF16': None}[info['dtype']]
        if dtype is None:
            raise SystemExit(f'{name}: BF16 is not supported by this check')
        start, end = info['data_offsets']
        a = np.frombuffer(data[start:end], dtype=dtype).astype(np.float32).reshape(info['shape'])
        out[name] = torch.from_numpy(a.copy())
    return out


def load_torch_model(model_dir):
    with open(os.path.join(model_dir, 'config.json'), encoding='utf-8') as f:
        c = json.load(f)
    cfg = ModelConfig(vocab_size=c['vocab_size'], dim=c['hidden_size'],
                      n_layers=c['num_hidden_layers'], n_heads=c['num_attention_heads'],
                      n_kv_heads=c.get('num_key_value_heads'),
                      intermediate=c['intermediate_size'], max_seq_len=c['max_position_embeddings'],
                      rope_theta=c['rope_theta'], rms_norm_eps=c['rms_norm_eps'],
                      tie_embeddings=c.get('tie_word_embeddings', False))
    model = Llama(cfg)
    tensors = read_safetensors(os.path.join(model_dir, 'model.safetensors'))
    state = {(k[len('model.'):] if k.startswith('model.') else k): v for k, v in tensors.items()}
    if cfg.tie_embeddings:
        state.setdefault('lm_head.weight', state['embed_tokens.weight'])
    model.load_state_dict(state)
    model.eval()
    return model, cfg


@torch.no_grad()
def torch_perplexity(model, ids, ctx, stride):
    """The guide's loop; NLL summed in float64 over every scored token."""
    nll = 0.0
    count = 0
    previous_end = 0
    for begin in range(0, len(ids), stride):
        end = min(begin + ctx, len(ids))
        window = torch.tensor([ids[begin:end]])
        logits = model(window)[0].double()
        first = max(previous_end, begin + 1)
        targets = torch.tensor(ids[first:end])
        rows = logits[first - 1 - begin:end - 1 - begin]
        nll += float(F.cross_entropy(rows, targets, reduction='sum'))
        count += end - first
        previous_end = end
        if end == len(ids):
            break
    return math.exp(nll / count), count


def kvasir_eval(args, backend, tokens_out):
    cmd = ['node', CLI, 'eval', '--model', args.model, '--file', args.file,
           '--ctx', str(args.ctx), '--stride', str(args.stride), '--backend', backend,
           '--kv-dtype', 'f32', '--reference-kv-dtype', 'none', '--json', '--no-progress',
           '--tokens-out', tokens_out]
    if args.max_tokens:
        cmd += ['--max-tokens', str(args.max_tokens)]
    started = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f'kvasir eval --backend {backend} failed:\n{done.stderr}')
    report = json.loads(done.stdout)
    report['wall_s'] = round(time.time() - started, 1)
    return report


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument('--model', required=True, help='exported HF directory (export.py --out)')
    ap.add_argument('--file', default=os.path.join(HERE, 'data', 'heldout.txt'))
    ap.add_argument('--ctx', type=int, default=512)
    ap.add_argument('--stride', type=int, default=256)
    ap.add_argument('--max-tokens', type=int, default=None)
    ap.add_argument('--backends', default='cpu,webgpu')
    ap.add_argument('--tolerance', type=float, default=0.005)
    ap.add_argument('--json', action='store_true')
    args = ap.parse_args()
    torch.set_num_threads(2)

    results = []
    ids = None
    with tempfile.TemporaryDirectory(prefix='kvasir-ppl-') as tmp:
        for backend in [b for b in args.backends.split(',') if b]:
            out = os.path.join(tmp, f'{backend}.json')
            report = kvasir_eval(args, backend, out)
            with open(out, encoding='utf-8') as f:
                these = json.load(f)
            if ids is not None and these != ids:
                raise SystemExit(f'{backend}: evaluated other token ids than the first backend')
            ids = these
            results.append(report)
    model, _ = load_torch_model(args.model)
    started = time.time()
    ppl, count = torch_perplexity(model, ids, args.ctx, args.stride)
    torch_s = round(time.time() - started, 1)
    ok = True
    rows = []
    for r in results:
        if r['scored_tokens'] != count:
            raise SystemExit(f"scored {r['scored_tokens']} tokens in Kvasir, {count} in PyTorch")
        rel = abs(r['perplexity'] / ppl - 1)
        ok = ok and rel <= args.tolerance
        rows.append({'backend': r['backend'], 'kvasir_perplexity': r['perplexity'],
                     'relative_difference': rel, 'kvasir_s': r['wall_s']})
    summary = {'model': os.path.abspath(args.model), 'file': os.path.abspath(args.file),
               'tokens': len(ids), 'scored_tokens': count, 'ctx': args.ctx, 'stride': args.stride,
               'torch_perplexity': ppl, 'torch_s': torch_s, 'backends': rows,
               'tolerance': args.tolerance, 'ok': ok}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f'{len(ids)} tokens, {count} scored (ctx {args.ctx}, stride {args.stride})')
        print(f'pytorch      perplexity {ppl:.6f} ({torch_s} s)')
        for row in rows:
            print(f"kvasir       perplexity {row['kvasir_perplexity']:.6f}  "
                  f"relative difference {100 * row['relative_difference']:.4f}%  "
                  f"({row['backend']}, {row['kvasir_s']} s)")
        print('ok' if ok else f'FAILED: a difference exceeds {100 * args.tolerance}%')
    sys.exit(0 if ok else 1)


if __name__ == '__main__':
    main()
