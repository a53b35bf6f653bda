#!/usr/bin/python3
"""Trains the Llama-architecture model of a config on data/train.bin, on the CPU.

Usage: nice -n 19 /usr/bin/python3 tooling/train/train.py --config tooling/train/configs/X.json
           [--resume] [--max-steps N] [--run-dir DIR]

Deterministic from the config's seed: weights are initialised from it, and the batch of step s
is a pure function of (seed, s): train.bin is cut into non-overlapping windows of seq_len + 1
tokens, each epoch visits them in a permutation drawn from seed + epoch, and step s takes
windows s*B .. s*B+B-1 of that endless sequence. A resumed run therefore sees exactly the
batches an uninterrupted one would. The LR schedule depends only on the step and the config's
fixed total_steps.

Writes into runs/<name>/: ckpt.pt (atomically: ckpt.pt.tmp, then rename; model, optimizer, step,
RNG state, elapsed time), log.jsonl (one line per logged step and per evaluation), and stops
cleanly (checkpoint first) on SIGTERM or SIGINT. --resume continues from ckpt.pt when it
exists and starts fresh otherwise, so the same command serves both.
"""

import argparse
import json
import math
import os
import signal
import sys
import time

import numpy as np
import torch
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Llama, ModelConfig, parameter_count  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, '..', '..'))


def load_config(path):
    with open(path, encoding='utf-8') as f:
        cfg = json.load(f)
    cfg['model'] = ModelConfig(**cfg['model'])
    return cfg


def load_tokens(path):
    return np.fromfile(path, dtype='<u2')


class Batches:
    """The batch of a step, from (seed, step) alone."""

    def __init__(self, tokens, seq_len, batch_size, seed):
        self.tokens = torch.from_numpy(tokens.astype(np.int64))
        self.seq_len = seq_len
        self.batch_size = batch_size
        self.seed = seed
        self.windows = (len(tokens) - 1) // seq_len
        self._epoch = None
        self._perm = None

    def epoch_of(self, step):
        return (step * self.batch_size) // self.windows

    def _permutation(self, epoch):
        if self._epoch != epoch:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._perm = torch.randperm(self.windows, generator=g)
            self._epoch = epoch
        return self._perm

    def get(self, step):
        rows = []
        for j in range(step * self.batch_size, (step + 1) * self.batch_size):
            epoch, i = divmod(j, self.windows)
            w = int(self._permutation(epoch)[i])
            rows.append(self.tokens[w * self.seq_len : w * self.seq_len + self.seq_len + 1])
        x = torch.stack(rows)
        return x[:, :-1].contiguous(), x[:, 1:].contiguous()


def lr_at(step, t):
    """Linear warmup to lr, then cosine to min_lr at total_steps."""
    if step < t['warmup_steps']:
        return t['lr'] * (step + 1) / t['warmup_steps']
    p = (step - t['warmup_steps']) / max(1, t['total_steps'] - t['warmup_steps'])
    p = min(1.0, p)
    return t['min_lr'] + 0.5 * (t['lr'] - t['min_lr']) * (1 + math.cos(math.pi * p))


def make_optimizer(model, t):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [
            {'params': decay, 'weight_decay': t['weight_decay']},
            {'params': no_decay, 'weight_decay': 0.0},
        ],
        lr=t['lr'],
        betas=(t['beta1'], t['beta2']),
        eps=1e-8,
    )


@torch.no_grad()
def evaluate(model, tokens, seq_len, windows, batch_size):
    """Mean next-token loss over `windows` evenly spaced non-overlapping held-out windows."""
    model.eval()
    n = (len(tokens) - 1) // seq_len
    idx = np.linspace(0, n - 1, num=min(windows, n)).round().astype(np.int64)
    total, count = 0.0, 0
    for s in range(0, len(idx), batch_size):
        rows = [tokens[i * seq_len : i * seq_len + seq_len + 1] for i in idx[s : s + batch_size]]
        x = torch.from_numpy(np.stack(rows).astype(np.int64))
        logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                               reduction='sum')
        total += float(loss)
        count += x[:, 1:].numel()
    model.train()
    return total / count


def save_checkpoint(path, model, opt, step, elapsed, cfg_json):
    tmp = path + '.tmp'
    torch.save(
        {
            'model': model.state_dict(),
            'optimizer': opt.state_dict(),
            'step': step,
            'elapsed_s': elapsed,
            'config': cfg_json,
            'torch_rng': torch.get_rng_state(),
            'numpy_rng': np.random.get_state(),
        },
        tmp,
    )
    with open(tmp, 'rb') as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


def trim_log(path, step):
    """Drops log lines past the checkpoint's step, so a resumed run's log has no duplicates."""
    if not os.path.exists(path):
        return
    with open(path, encoding='utf-8') as f:
        kept = [ln for ln in f if ln.strip() and json.loads(ln)['step'] <= step]
    with open(path + '.tmp', 'w', encoding='utf-8') as f:
        f.writelines(kept)
    os.replace(path + '.tmp', path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument('--config', required=True)
    ap.add_argument('--resume', action='store_true', help='continue from ckpt.pt if present')
    ap.add_argument('--max-steps', type=int, default=None,
                    help='stop (with a checkpoint) after this step; the schedule is unchanged')
    ap.add_argument('--run-dir', default=None, help='default: tooling/train/runs/<name>')
    args = ap.parse_args()

    with open(args.config, encoding='utf-8') as f:
        cfg_json = json.load(f)
    cfg = load_config(args.config)
    t = cfg['train']
    mcfg = cfg['model']
    torch.set_num_threads(t.get('threads', 2))
    run_dir = args.run_dir or os.path.join(HERE, 'runs', cfg['name'])
    os.makedirs(run_dir, exist_ok=True)
    ckpt_path = os.path.join(run_dir, 'ckpt.pt')
    log_path = os.path.join(run_dir, 'log.jsonl')
    data_dir = os.path.join(REPO, cfg['data_dir'])

    train_tokens = load_tokens(os.path.join(data_dir, 'train.bin'))
    heldout_tokens = load_tokens(os.path.join(data_dir, 'heldout.bin'))
    seq_len = t['seq_len']
    batches = Batches(train_tokens, seq_len, t['batch_size'], cfg['seed'])

    torch.manual_seed(cfg['seed'])
    model = Llama(mcfg)
    model.init_weights(torch.Generator().manual_seed(cfg['seed']))
    opt = make_optimizer(model, t)
    step, elapsed = 0, 0.0
    if args.resume and os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path, map_location='cpu')
        if ck['config'] != cfg_json:
            raise SystemExit(f'{ckpt_path} was written under a different config; refusing')
        model.load_state_dict(ck['model'])
        opt.load_state_dict(ck['optimizer'])
        torch.set_rng_state(ck['torch_rng'])
        np.random.set_state(ck['numpy_rng'])
        step, elapsed = ck['step'], ck['elapsed_s']
        trim_log(log_path, step)
        print(f'resumed from {ckpt_path} at step {step} ({elapsed / 3600:.2f} h so far)',
              flush=True)
    elif os.path.exists(log_path):
        os.remove(log_path)
    with open(os.path.join(run_dir, 'config.json'), 'w', encoding='utf-8') as f:
        json.dump(cfg_json, f, indent=2)

    total = t['total_steps']
    last = total if args.max_steps is None else min(total, args.max_steps)
    tokens_per_step = t['batch_size'] * seq_len
    print(f'{parameter_count(model):,} parameters; {batches.windows} windows of {seq_len} per '
          f'epoch; {tokens_per_step} tokens/step; steps {step}..{last} of {total}', flush=True)

    stop = {'now': False}

    def on_signal(signum, _frame):
        stop['now'] = True
        print(f'signal {signum}: checkpointing and stopping', flush=True)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    log = open(log_path, 'a', encoding='utf-8')

    def write_log(rec):
        log.write(json.dumps(rec) + '\n')
        log.flush()

    last_ckpt = time.monotonic()
    t_start = time.monotonic() - elapsed
    micro = t.get('micro_batch', t['batch_size'])
    window_t, window_tokens = time.monotonic(), 0
    model.train()
    while step < last and not stop['now']:
        lr = lr_at(step, t)
        for g in opt.param_groups:
            g['lr'] = lr
        x, y = batches.get(step)
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for m in range(0, x.shape[0], micro):
            logits = model(x[m : m + micro])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y[m : m + micro].reshape(-1))
            (loss * (logits.shape[0] / x.shape[0])).backward()
            loss_sum += float(loss) * logits.shape[0]
        gnorm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), t['grad_clip']))
        opt.step()
        step += 1
        window_tokens += tokens_per_step
        now = time.monotonic()
        if step % t['log_every'] == 0 or step == last:
            rec = {
                'step': step,
                'tokens': step * tokens_per_step,
                'epoch': round(step * t['batch_size'] / batches.windows, 3),
                'loss': round(loss_sum / x.shape[0], 4),
                'lr': lr,
                'grad_norm': round(gnorm, 4),
                'tokens_per_s': round(window_tokens / (now - window_t), 1),
                'elapsed_s': round(now - t_start, 1),
            }
            write_log(rec)
            print(json.dumps(rec), flush=True)
            window_t, window_tokens = now, 0
        if step % t['eval_every'] == 0 or step == total:
            windows = t['eval_windows'] if step < total else 10**9
            hl = evaluate(model, heldout_tokens, seq_len, windows, micro)
            rec = {'step': step, 'tokens': step * tokens_per_step, 'heldout_loss': round(hl, 4),
                   'heldout_ppl': round(math.exp(hl), 3),
                   'heldout_windows': 'all' if step == total else windows,
                   'elapsed_s': round(time.monotonic() - t_start, 1)}
            write_log(rec)
            print(json.dumps(rec), flush=True)
            window_t, window_tokens = time.monotonic(), 0
        if time.monotonic() - last_ckpt >= t['checkpoint_every_s'] or step == last or stop['now']:
            save_checkpoint(ckpt_path, model, opt, step, time.monotonic() - t_start, cfg_json)
            last_ckpt = time.monotonic()
    if stop['now'] and step < last:
        save_checkpoint(ckpt_path, model, opt, step, time.monotonic() - t_start, cfg_json)
    log.close()
    print(f'stopped at step {step} of {total}', flush=True)


if __name__ == '__main__':
    main()
