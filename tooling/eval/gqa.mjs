// Table 2, GQA conversion: MHA → GQA after Ainslie et al. (2023) on the trained model. The packaged
// MHA model (8 KV heads); @kvasir/model's convertToGqa mean-pooling its K/V heads to 2 (GQA-2)
// and to 1 (MQA) with no training; each converted model uptrained for 70 steps (5% of the
// 1,400 pre-training steps) by tooling/train/uptrain_gqa.py; and the MHA model trained for the
// same 70 steps as a control (how much of the "recovery" is just more training). Each row's
// perplexity through `kvasir eval` (table 1's text, windows and backend: the first 2,048 held-out
// tokens, ctx 512, stride 256, f16 KV, wasm), its mean KL divergence and top-1 agreement against
// the MHA model at every scored position, its KV bytes per token from `kvasir info`, and
// PyTorch's held-out loss over all 582 512-token windows (the model card's figure), read from
// the uptraining logs. One JSON line per row on stdout.
//
// The uptraining runs first unless their checkpoints are done (uptrain_gqa.py --resume), and
// uptrain_gqa.py checks that its pooled weights equal convertToGqa's bit for bit.
// Checkpoints go to tooling/train/runs/gqa/ (gitignored).
//
//   node tooling/eval/gqa.mjs [--tokens 2048] [--backend wasm] > packages/mini-model/bench/gqa.jsonl
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { parseArgs } from 'node:util';

const repo = resolve(new URL('.', import.meta.url).pathname, '../..');
const { values } = parseArgs({
  options: {
    tokens: { type: 'string', default: '2048' },
    backend: { type: 'string', default: 'wasm' },
    steps: { type: 'string', default: '70' },
  },
});
const cli = join(repo, 'apps/kvasir/dist/cli.js');
const text = join(repo, 'tooling/train/data/heldout.txt');
const mha = join(repo, 'packages/mini-model/hf');
const runs = join(repo, 'tooling/train/runs/gqa');
if (!existsSync(text)) throw new Error(`no ${text}: run tooling/train/prepare_corpus.py first`);
mkdirSync(runs, { recursive: true });
const say = (what) => process.stderr.write(`[gqa] ${what}\n`);
const runJson = (args) =>
  JSON.parse(
    execFileSync(process.execPath, [cli, ...args], {
      cwd: repo,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'inherit'],
    }),
  );

const { convertToGqa } = await import(join(repo, 'packages/model/dist/index.js'));
for (const g of [2, 1]) {
  say(`convertToGqa ${relative(repo, mha)} → ${g} KV heads`);
  await convertToGqa(mha, join(runs, `converted-gqa${g}`), g);
}
for (const g of [8, 2, 1]) {
  const runDir = join(runs, `uptrained-gqa${g}`);
  say(`uptrain_gqa.py --kv-heads ${g} (${values.steps} steps) → ${relative(repo, runDir)}`);
  execFileSync(
    'nice',
    [
      '-n',
      '19',
      '/usr/bin/python3',
      join(repo, 'tooling/train/uptrain_gqa.py'),
      '--kv-heads',
      String(g),
      '--steps',
      values.steps,
      '--run-dir',
      runDir,
      '--resume',
      ...(g === 8 ? [] : ['--compare-with', join(runs, `converted-gqa${g}`)]),
    ],
    // Its log goes to stderr: stdout is the table's JSON lines.
    { cwd: repo, stdio: ['ignore', 2, 'inherit'] },
  );
}

/** PyTorch's all-window held-out loss of a run at its first (converted) or last (uptrained) step. */
function torchLoss(g, which) {
  const log = readFileSync(join(runs, `uptrained-gqa${g}`, 'log.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l))
    .filter((r) => r.heldout_windows === 'all');
  const r = which === 'first' ? log[0] : log.at(-1);
  return { step: r.step, uptrain_step: r.uptrain_step, loss: r.heldout_loss, ppl: r.heldout_ppl };
}

const rows = [
  { row: 'MHA', model: mha, kv_heads: 8, uptrain_steps: 0, torch: torchLoss(8, 'first') },
  {
    row: 'MHA + uptraining (control)',
    model: join(runs, 'uptrained-gqa8/hf'),
    kv_heads: 8,
    uptrain_steps: Number(values.steps),
    torch: torchLoss(8, 'last'),
  },
  {
    row: 'GQA-2 converted',
    model: join(runs, 'converted-gqa2'),
    kv_heads: 2,
    uptrain_steps: 0,
    torch: torchLoss(2, 'first'),
  },
  {
    row: 'MQA converted',
    model: join(runs, 'converted-gqa1'),
    kv_heads: 1,
    uptrain_steps: 0,
    torch: torchLoss(1, 'first'),
  },
  {
    row: 'GQA-2 uptrained',
    model: join(runs, 'uptrained-gqa2/hf'),
    kv_heads: 2,
    uptrain_steps: Number(values.steps),
    torch: torchLoss(2, 'last'),
  },
  {
    row: 'MQA uptrained',
    model: join(runs, 'uptrained-gqa1/hf'),
    kv_heads: 1,
    uptrain_steps: Number(values.steps),
    torch: torchLoss(1, 'last'),
  },
];

const work = mkdtempSync(join(tmpdir(), 'kvasir-gqa-'));
try {
  const common = [
    'eval',
    '-f',
    text,
    '--max-tokens',
    values.tokens,
    '--ctx',
    '512',
    '--stride',
    '256',
    '--backend',
    values.backend,
    '--kv-dtype',
    'f16',
    '--json',
    '--no-progress',
  ];
  const reference = join(work, 'mha.json');
  const out = [];
  for (const r of rows) {
    say(`kvasir eval ${relative(repo, r.model)}`);
    const first = out.length === 0;
    const ev = runJson([
      ...common,
      '-m',
      r.model,
      ...(first
        ? ['--reference-kv-dtype', 'none', '--save-logits', reference]
        : ['--reference', reference]),
    ]);
    const info = runJson([
      'info',
      '--json',
      '-m',
      r.model,
      '--backend',
      values.backend,
      '--kv-dtype',
      'f16',
    ]);
    if (info.model.kv_heads !== r.kv_heads) {
      throw new Error(`${r.model}: ${info.model.kv_heads} KV heads, expected ${r.kv_heads}`);
    }
    out.push({ ...r, kv_bytes_per_token: info.kv_cache.bytes_per_token, eval: ev });
  }
  // How much of the conversion's loss uptraining won back, in nats per token: (converted −
  // uptrained) ÷ (converted − MHA), on Kvasir's perplexity and on PyTorch's all-window loss.
  const base = out[0];
  const control = out[1];
  for (const r of out) {
    const conv = out.find((c) => c.kv_heads === r.kv_heads && c.uptrain_steps === 0);
    const recovered = (f) =>
      r.uptrain_steps === 0 || r.kv_heads === 8 ? null : (f(conv) - f(r)) / (f(conv) - f(base));
    const nll = (x) => x.eval.mean_nll;
    const tl = (x) => x.torch.loss;
    console.log(
      JSON.stringify({
        row: r.row,
        model: relative(repo, r.model),
        kv_heads: r.kv_heads,
        uptrain_steps: r.uptrain_steps,
        kv_bytes_per_token: r.kv_bytes_per_token,
        kv_bytes_ratio: r.kv_bytes_per_token / base.kv_bytes_per_token,
        perplexity: r.eval.perplexity,
        delta_ppl_vs_mha: r.eval.perplexity - base.eval.perplexity,
        recovered: recovered(nll),
        torch_heldout_loss_all: r.torch.loss,
        torch_heldout_ppl_all: r.torch.ppl,
        torch_delta_ppl_vs_mha: r.torch.ppl - base.torch.ppl,
        torch_recovered: recovered(tl),
        torch_delta_loss_vs_control: r.torch.loss - control.torch.loss,
        eval: r.eval,
      }),
    );
  }
} finally {
  rmSync(work, { recursive: true, force: true });
}
