#!/usr/bin/python3
"""Exports a training checkpoint as a Hugging Face Llama directory, plus reference logits.

Usage: /usr/bin/python3 tooling/train/export.py --run tooling/train/runs/<name>
           [--out DIR (default <run>/hf)] [--dtype f16|f32 (default f16)]

Writes config.json (LlamaForCausalLM), model.safetensors (written here by hand: 8-byte
little-endian header length, JSON header, raw little-endian tensors), tokenizer.json,
tokenizer_config.json (bos/eos, Llama 3 style chat template), generation_config.json and
training.json (step, tokens, held-out loss so far). The model uses HF's rotate_half RoPE, so
q_proj/k_proj go out as they are, with no permutation.

Beside the directory, <out>-reference.json and <out>-reference.f32 hold a held-out snippet's
token ids, the PyTorch model's logits at every position (computed from the weights as rounded
to the exported dtype, so the comparison isolates the loader and forward pass) and its greedy
continuation; check_export.mjs compares Kvasir against them.
"""

import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Llama, ModelConfig, parameter_count  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, '..', '..'))
BOS_ID = 256
EOS_IDS = [257, 260]  # <|end_of_text|>, <|eot_id|>
SNIPPET_TOKENS = 96
GREEDY_TOKENS = 24


def hf_name(name):
    return name if name == 'lm_head.weight' else f'model.{name}'


def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, numpy array) in file order."""
    header = {'__metadata__': metadata}
    offset = 0
    for name, a in tensors:
        dtype = {np.float16: 'F16', np.float32: 'F32'}[a.dtype.type]
        header[name] = {'dtype': dtype, 'shape': list(a.shape),
                        'data_offsets': [offset, offset + a.nbytes]}
        offset += a.nbytes
    h = json.dumps(header, separators=(',', ':')).encode('utf-8')
    h += b' ' * (-len(h) % 8)  # data starts 8-byte aligned
    tmp = path + '.tmp'
    with open(tmp, 'wb') as f:
        f.write(struct.pack('<Q', len(h)))
        f.write(h)
        for _, a in tensors:
            f.write(np.ascontiguousarray(a).astype(a.dtype.newbyteorder('<'), copy=False).tobytes())
    os.replace(tmp, path)


def hf_config(m, dtype, tie):
    return {
        'architectures': ['LlamaForCausalLM'],
        'model_type': 'llama',
        'hidden_size': m.dim,
        'intermediate_size': m.intermediate,
        'num_hidden_layers': m.n_layers,
        'num_attention_heads': m.n_heads,
        'num_key_value_heads': m.kv_heads,
        'head_dim': m.head_dim,
        'hidden_act': 'silu',
        'max_position_embeddings': m.max_seq_len,
        'rms_norm_eps': m.rms_norm_eps,
        'rope_theta': m.rope_theta,
        'rope_scaling': None,
        'attention_bias': False,
        'attention_dropout': 0.0,
        'mlp_bias': False,
        'pretraining_tp': 1,
        'initializer_range': 0.02,
        'tie_word_embeddings': tie,
        'vocab_size': m.vocab_size,
        'bos_token_id': BOS_ID,
        'eos_token_id': EOS_IDS,
        'use_cache': True,
        'torch_dtype': {'f16': 'float16', 'f32': 'float32'}[dtype],
    }


def snippet(data_dir):
    """The first SNIPPET_TOKENS tokens of the held-out document nearest the middle of the file."""
    ids = np.fromfile(os.path.join(data_dir, 'heldout.bin'), dtype='<u2')
    starts = np.flatnonzero(ids == BOS_ID)
    start = int(starts[np.searchsorted(starts, len(ids) // 2)])
    return [int(t) for t in ids[start : start + SNIPPET_TOKENS]]


@torch.no_grad()
def greedy(model, ids, n):
    out = []
    seq = list(ids)
    for _ in range(n):
        nxt = int(model(torch.tensor([seq]))[0, -1].argmax())
        out.append(nxt)
        seq.append(nxt)
        if nxt in EOS_IDS:
            break
    return out


def last_heldout(run_dir):
    path = os.path.join(run_dir, 'log.jsonl')
    best = None
    if os.path.exists(path):
        with open(path, encoding='utf-8') as f:
            for line in f:
                rec = json.loads(line)
                if 'heldout_loss' in rec:
                    best = rec
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument('--run', required=True, help='run directory holding ckpt.pt')
    ap.add_argument('--out', default=None)
    ap.add_argument('--dtype', choices=['f16', 'f32'], default='f16')
    args = ap.parse_args()
    out = args.out or os.path.join(args.run, 'hf')
    torch.set_num_threads(2)

    ck = torch.load(os.path.join(args.run, 'ckpt.pt'), map_location='cpu')
    cfg = ck['config']
    mcfg = ModelConfig(**cfg['model'])
    model = Llama(mcfg)
    model.load_state_dict(ck['model'])
    model.eval()
    np_dtype = {'f16': np.float16, 'f32': np.float32}[args.dtype]

    params = [(n, p) for n, p in model.state_dict().items()
              if not (mcfg.tie_embeddings and n == 'lm_head.weight')]
    tensors = []
    with torch.no_grad():
        for name, p in params:
            a = p.numpy().astype(np_dtype)
            tensors.append((hf_name(name), a))
            # The reference model below runs (in f32) on exactly the exported values.
            p.copy_(torch.from_numpy(a.astype(np.float32)))

    os.makedirs(out, exist_ok=True)
    step = ck['step']
    write_safetensors(os.path.join(out, 'model.safetensors'), tensors,
                      {'format': 'pt', 'generator': 'kvasir tooling/train/export.py',
                       'run': cfg['name'], 'step': str(step)})

    def dump(obj, name):
        with open(os.path.join(out, name), 'w', encoding='utf-8') as f:
            f.write(json.dumps(obj, indent=2) + '\n')

    dump(hf_config(mcfg, args.dtype, mcfg.tie_embeddings), 'config.json')
    dump({'bos_token_id': BOS_ID, 'eos_token_id': EOS_IDS, 'do_sample': True,
          'temperature': 0.7, 'top_p': 0.9, 'max_length': mcfg.max_seq_len}, 'generation_config.json')
    data_dir = os.path.join(REPO, cfg['data_dir'])
    shutil.copyfile(os.path.join(data_dir, 'tokenizer.json'), os.path.join(out, 'tokenizer.json'))
    with open(os.path.join(data_dir, 'tokenizer_config.json'), encoding='utf-8') as f:
        tok_cfg = json.load(f)
    tok_cfg['model_max_length'] = mcfg.max_seq_len
    dump(tok_cfg, 'tokenizer_config.json')
    t = cfg['train']
    dump({'run': cfg['name'], 'step': step, 'total_steps': t['total_steps'],
          'tokens_seen': step * t['batch_size'] * t['seq_len'],
          'elapsed_s': round(ck['elapsed_s'], 1), 'parameters': parameter_count(model),
          'last_heldout_eval': last_heldout(args.run), 'dtype': args.dtype,
          'config': cfg}, 'training.json')

    ids = snippet(data_dir)
    with torch.no_grad():
        logits = model(torch.tensor([ids]))[0].float().numpy()
    cont = greedy(model, ids, GREEDY_TOKENS)
    ref = out.rstrip('/') + '-reference'
    logits.astype('<f4').tofile(ref + '.f32')
    with open(ref + '.json', 'w', encoding='utf-8') as f:
        json.dump({'model_dir': os.path.abspath(out), 'step': step, 'ids': ids,
                   'vocab_size': mcfg.vocab_size, 'logits_file': os.path.abspath(ref + '.f32'),
                   'greedy': cont}, f)
        f.write('\n')
    size = os.path.getsize(os.path.join(out, 'model.safetensors'))
    print(f'exported step {step} ({parameter_count(model):,} parameters, {args.dtype}, '
          f'{size / 1e6:.1f} MB) to {out}; reference {ref}.json')


if __name__ == '__main__':
    main()
