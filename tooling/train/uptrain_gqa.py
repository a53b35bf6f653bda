#!/usr/bin/python3
"""MHA -> GQA after Ainslie et al. (2023): mean-pool a trained model's K/V heads, then uptrain.

Usage: nice -n 19 /usr/bin/python3 tooling/train/uptrain_gqa.py --kv-heads G
           [--hf packages/mini-model/hf] [--config tooling/train/configs/kvasir-mini-v1.json]
           [--steps 70] [--run-dir DIR (default tooling/train/runs/<name>-gqa<G>)]
           [--resume] [--stop-after N] [--compare-with DIR] [--no-export]

1. Reads the exported MHA model (`--hf`, F16 safetensors) and mean-pools each layer's k_proj and
   v_proj heads in groups of n_heads / G consecutive heads, exactly as @kvasir/model's
   convertToGqa does (sum in float64, round to float32, then to float16), so step 0 of this run
   is the checkpoint convertToGqa writes. `--compare-with` takes convertToGqa's output directory
   and exits 1 unless every tensor there equals the pooled one bit for bit. G = n_heads is a
   control: no pooling, the MHA model trained for the same extra steps.
2. Evaluates the converted model on the held-out split (32 windows, and all 512-token windows,
   like train.py's final evaluation), then uptrains it for `--steps` steps (default 70, 5% of the
   1,400 pre-training steps, the paper's proportion) with the pre-training recipe from where it
   stopped: the batches of steps 1400, 1401, ... of train.py's seeded stream (the data the run
   would have seen next), batch size, AdamW settings, gradient clipping and train.py's LR
   schedule at those steps (past total_steps it stays at min_lr, the tail of the run). AdamW
   starts with fresh moments: the export holds no optimizer state, and K/V's shapes changed.
3. Evaluates again (all windows) and exports an HF directory with export.py into <run-dir>/hf.

Deterministic (no dropout, no random initialisation, data by step). Checkpoints <run-dir>/ckpt.pt
every checkpoint_every_s and at the end (model, optimizer, step, config; the format export.py
reads), logs to <run-dir>/log.jsonl, and on SIGTERM/SIGINT checkpoints and stops; --resume
continues from ckpt.pt and the log, so a killed run logs the same losses as an unbroken one.
"""

import argparse
import copy
import json
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import torch
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_perplexity import read_safetensors  # noqa: E402
from model import Llama, ModelConfig, parameter_count  # noqa: E402
from train import (Batches, evaluate, load_tokens, lr_at, make_optimizer,  # noqa: E402
                   save_checkpoint, trim_log)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, '..', '..'))


def mean_pool_heads(w, heads, head_dim, group):
    """[heads * head_dim, in] -> [heads / group * head_dim, in]; convertToGqa's meanPoolHeads.

    New head j is the mean of old heads j*group .. j*group+group-1, so query head h keeps reading
    the pool of the heads it read before (h // (n_heads / G)). float64 sum, float32, float16: the
    same roundings as convertToGqa (Float64Array accumulator, Float32Array, F16 safetensors).
    """
    if group == 1:
        return w.clone()
    a = w.double().numpy().reshape(heads // group, group, head_dim, -1)
    pooled = a.sum(axis=1) / group
    pooled = pooled.reshape(-1, w.shape[1]).astype(np.float32).astype(np.float16)
    return torch.from_numpy(pooled.astype(np.float32))


def converted_state(hf_dir, mcfg, kv_heads):
    tensors = read_safetensors(os.path.join(hf_dir, 'model.safetensors'))
    state = {(k[len('model.'):] if k.startswith('model.') else k): v for k, v in tensors.items()}
    if mcfg.tie_embeddings:
        state.setdefault('lm_head.weight', state['embed_tokens.weight'])
    group = mcfg.n_heads // kv_heads
    for name in list(state):
        if name.endswith(('self_attn.k_proj.weight', 'self_attn.v_proj.weight')):
            state[name] = mean_pool_heads(state[name], mcfg.n_heads, mcfg.head_dim, group)
    return state


def compare_with(path, state):
    """Exits 1 unless convertToGqa's tensors in `path` equal the pooled ones bit for bit."""
    theirs = read_safetensors(os.path.join(path, 'model.safetensors'))
    worst = 0.0
    for name, ours in state.items():
        key = name if name == 'lm_head.weight' else f'model.{name}'
        if key not in theirs or tuple(theirs[key].shape) != tuple(ours.shape):
            raise SystemExit(f'{path}: tensor {key} missing or of another shape')
        worst = max(worst, float((theirs[key] - ours).abs().max()))
    print(json.dumps({'compare_with': os.path.abspath(path), 'tensors': len(state),
                      'max_abs_difference': worst}), flush=True)
    if worst != 0.0:
        raise SystemExit('the pooled weights differ from convertToGqa\'s')


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument('--kv-heads', type=int, required=True, help='KV heads after pooling (G)')
    ap.add_argument('--hf', default=os.path.join(REPO, 'packages', 'mini-model', 'hf'))
    ap.add_argument('--config', default=os.path.join(HERE, 'configs', 'kvasir-mini-v1.json'))
    ap.add_argument('--steps', type=int, default=70)
    ap.add_argument('--run-dir', default=None)
    ap.add_argument('--resume', action='store_true', help='continue from ckpt.pt if present')
    ap.add_argument('--compare-with', default=None, help="convertToGqa's output directory")
    ap.add_argument('--stop-after', type=int, default=None,
                    help='stop (with a checkpoint) after this many uptraining steps; --resume goes on')
    ap.add_argument('--no-export', action='store_true')
    args = ap.parse_args()

    with open(args.config, encoding='utf-8') as f:
        base = json.load(f)
    with open(os.path.join(args.hf, 'training.json'), encoding='utf-8') as f:
        trained = json.load(f)
    if trained['config'] != base:
        raise SystemExit(f'{args.hf} was not trained under {args.config}')
    mbase = ModelConfig(**base['model'])
    if args.kv_heads < 1 or mbase.n_heads % args.kv_heads != 0:
        raise SystemExit(f'--kv-heads must divide the {mbase.n_heads} heads, got {args.kv_heads}')
    t = base['train']
    start = trained['step']
    cfg_json = copy.deepcopy(base)
    cfg_json['name'] = f"{base['name']}-gqa{args.kv_heads}"
    cfg_json['model']['n_kv_heads'] = args.kv_heads
    cfg_json['uptrain'] = {'from': os.path.relpath(os.path.abspath(args.hf), REPO),
                           'from_step': start, 'steps': args.steps,
                           'pooling': 'mean of consecutive K/V heads (convertToGqa)'}
    mcfg = ModelConfig(**cfg_json['model'])
    torch.set_num_threads(t.get('threads', 2))
    torch.manual_seed(base['seed'])
    run_dir = args.run_dir or os.path.join(HERE, 'runs', cfg_json['name'])
    os.makedirs(run_dir, exist_ok=True)
    ckpt_path = os.path.join(run_dir, 'ckpt.pt')
    log_path = os.path.join(run_dir, 'log.jsonl')
    data_dir = os.path.join(REPO, base['data_dir'])
    train_tokens = load_tokens(os.path.join(data_dir, 'train.bin'))
    heldout = load_tokens(os.path.join(data_dir, 'heldout.bin'))
    seq_len = t['seq_len']
    batches = Batches(train_tokens, seq_len, t['batch_size'], base['seed'])
    micro = t.get('micro_batch', t['batch_size'])

    model = Llama(mcfg)
    state = converted_state(args.hf, mbase, args.kv_heads)
    if args.compare_with:
        compare_with(args.compare_with, state)
    model.load_state_dict(state)
    opt = make_optimizer(model, t)
    step, elapsed = start, 0.0
    last = start + args.steps
    stop_at = last if args.stop_after is None else min(last, start + args.stop_after)
    log_mode = 'w'
    if args.resume and os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path, map_location='cpu')
        if ck['config'] != cfg_json:
            raise SystemExit(f'{ckpt_path} was written under a different config; refusing')
        model.load_state_dict(ck['model'])
        opt.load_state_dict(ck['optimizer'])
        step, elapsed = ck['step'], ck['elapsed_s']
        trim_log(log_path, step)
        log_mode = 'a'
        print(f'resumed from {ckpt_path} at step {step}', flush=True)
    with open(os.path.join(run_dir, 'config.json'), 'w', encoding='utf-8') as f:
        json.dump(cfg_json, f, indent=2)
    log = open(log_path, log_mode, encoding='utf-8')

    def write_log(rec):
        log.write(json.dumps(rec) + '\n')
        log.flush()
        print(json.dumps(rec), flush=True)

    def heldout_eval(windows):
        hl = evaluate(model, heldout, seq_len, windows, micro)
        write_log({'step': step, 'uptrain_step': step - start, 'heldout_loss': round(hl, 4),
                   'heldout_ppl': round(math.exp(hl), 3),
                   'heldout_windows': 'all' if windows >= 10**9 else windows,
                   'kv_heads': args.kv_heads})

    print(f'{parameter_count(model):,} parameters, {args.kv_heads} KV heads of {mcfg.n_heads}; '
          f'uptraining steps {step}..{last} (lr {lr_at(step, t):.2e})', flush=True)
    stop = {'now': False}

    def on_signal(signum, _frame):
        stop['now'] = True
        print(f'signal {signum}: checkpointing and stopping', flush=True)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    if step == start:
        heldout_eval(10**9)
        heldout_eval(t['eval_windows'])
    t_start = time.monotonic() - elapsed
    last_ckpt = time.monotonic()
    tokens_per_step = t['batch_size'] * seq_len
    model.train()
    while step < stop_at and not stop['now']:
        lr = lr_at(step, t)
        for g in opt.param_groups:
            g['lr'] = lr
        x, y = batches.get(step)
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        began = time.monotonic()
        for m in range(0, x.shape[0], micro):
            logits = model(x[m : m + micro])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y[m : m + micro].reshape(-1))
            (loss * (logits.shape[0] / x.shape[0])).backward()
            loss_sum += float(loss) * logits.shape[0]
        gnorm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), t['grad_clip']))
        opt.step()
        step += 1
        if (step - start) % t['log_every'] == 0 or step == last:
            write_log({'step': step, 'uptrain_step': step - start, 'loss': round(loss_sum / x.shape[0], 4),
                       'lr': lr, 'grad_norm': round(gnorm, 4),
                       'tokens_per_s': round(tokens_per_step / (time.monotonic() - began), 1),
                       'elapsed_s': round(time.monotonic() - t_start, 1)})
            heldout_eval(t['eval_windows'])
        if step == last:
            heldout_eval(10**9)
        if (time.monotonic() - last_ckpt >= t['checkpoint_every_s'] or step == stop_at
                or stop['now']):
            save_checkpoint(ckpt_path, model, opt, step, time.monotonic() - t_start, cfg_json)
            last_ckpt = time.monotonic()
    log.close()
    print(f'stopped at step {step} ({step - start} of {args.steps} uptraining steps)', flush=True)
    if step == last and not args.no_export:
        subprocess.run([sys.executable, os.path.join(HERE, 'export.py'), '--run', run_dir,
                        '--out', os.path.join(run_dir, 'hf')], check=True)


if __name__ == '__main__':
    main()
