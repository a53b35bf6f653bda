// Table 3, KV-format speed: decode tokens/s at batch 1 and KV bytes per token for every row of tables 1
// (each KV format on the MHA model) and 2 (the GQA/MQA models of tooling/eval/gqa.mjs, f16 KV).
// @kvasir/model's paged forward pass on one backend (default wasm, the backend present here):
// every row's model loaded at once, a held-out prompt prefilled and one untimed decode step run
// in each, then `--steps` decode steps timed one by one, round-robin across the rows; a row's
// figure is its median step over `--passes` such passes. At a short context (16-token prompt)
// and a long one (432 tokens: the timed steps attend over 434–497 positions), where reading the
// KV cache is a larger share of a step. The machine is shared and noisy: interleaving the rows
// step by step gives them the same contention, and each row is also reported relative to the
// f16/MHA row (the median over steps of f16/MHA's step time ÷ the row's, both timed in the same
// round): the ratios are the figures to read, not the absolute tokens/s.
//
//   node tooling/eval/decode-speed.mjs [--backend wasm] [--steps 64] [--passes 5]
//     > packages/mini-model/bench/decode-speed.jsonl
import { existsSync, readFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { parseArgs } from 'node:util';

const repo = resolve(new URL('.', import.meta.url).pathname, '../..');
const { values } = parseArgs({
  options: {
    backend: { type: 'string', default: 'wasm' },
    steps: { type: 'string', default: '64' },
    passes: { type: 'string', default: '5' },
  },
});
const steps = Number(values.steps);
const passes = Number(values.passes);
const say = (what) => process.stderr.write(`[decode-speed] ${what}\n`);
const { loadModel } = await import(join(repo, 'packages/model/dist/index.js'));

const heldout = join(repo, 'tooling/train/data/heldout.bin');
if (!existsSync(heldout)) throw new Error(`no ${heldout}: run tooling/train/train_tokenizer.mjs`);
const bin = readFileSync(heldout);
const tokens = Array.from(new Uint16Array(bin.buffer, bin.byteOffset, 512));

const mha = join(repo, 'packages/mini-model/hf');
const gqa = join(repo, 'tooling/train/runs/gqa');
const rows = [
  ...['f16', 'f32', 'int8', 'int8-h8', 'fp8-e4m3', 'fp8-e5m2', 'int4', 'int4-h32'].map((kv) => ({
    table: 1,
    row: `MHA, ${kv} KV`,
    model: mha,
    kv,
  })),
  ...[
    ['MHA + uptraining (control)', 'uptrained-gqa8/hf'],
    ['GQA-2 converted', 'converted-gqa2'],
    ['MQA converted', 'converted-gqa1'],
    ['GQA-2 uptrained', 'uptrained-gqa2/hf'],
    ['MQA uptrained', 'uptrained-gqa1/hf'],
  ].map(([row, dir]) => ({ table: 2, row, model: join(gqa, dir), kv: 'f16' })),
];
for (const r of rows) {
  if (!existsSync(join(r.model, 'config.json'))) {
    throw new Error(`no model at ${r.model}: run tooling/eval/gqa.mjs first`);
  }
}

// The app's --kv-dtype names where @kvasir/model's kvFormat names differ (engine/load-model-runner.ts).
const KV_FORMAT = { int4: 'int4-g32', 'int4-h32': 'int4-g32-h32' };
const BLOCK = 16;
const CONTEXTS = [
  { name: 'short', prompt: 16 },
  { name: 'long', prompt: 432 },
];

/** A row's model, loaded with its KV format, its prompt prefilled and one decode step run. */
async function prepare(row, prompt) {
  const numBlocks = Math.ceil((prompt + steps + 1) / BLOCK);
  const model = await loadModel(row.model, {
    backend: values.backend,
    kvFormat: KV_FORMAT[row.kv] ?? row.kv,
    numBlocks,
    blockSize: BLOCK,
  });
  const blockTable = Array.from({ length: numBlocks }, (_, i) => i);
  const step = (ids, start) =>
    model.forward({
      tokenIds: Int32Array.from(ids),
      positions: Int32Array.from(ids, (_, i) => start + i),
      slotMapping: Int32Array.from(ids, (_, i) => start + i),
      rows: [{ queryStart: 0, queryLen: ids.length, contextLen: start + ids.length, blockTable }],
      logitsIndices: Int32Array.of(ids.length - 1),
    });
  await step(tokens.slice(0, prompt), 0);
  await step([tokens[prompt]], prompt);
  return { model, step };
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

/** One pass: every row's step times (ms), in the same order for every row. */
async function pass(ctx, ms, facts) {
  const loaded = [];
  try {
    for (const row of rows) loaded.push(await prepare(row, ctx.prompt));
    // Step s of every row runs before step s + 1 of any, starting from a different row each
    // time, so that every row meets the same contention from the machine's other work.
    for (let s = 1; s <= steps; s++) {
      for (let k = 0; k < rows.length; k++) {
        const i = (s + k) % rows.length;
        const pos = ctx.prompt + s;
        const t0 = performance.now();
        await loaded[i].step([tokens[pos % tokens.length]], pos);
        ms[i].push(performance.now() - t0);
      }
    }
    loaded.forEach(({ model }, i) => {
      facts[i] = {
        kv_heads: model.config.numKvHeads,
        kv_bytes_per_token: model.kvBlockBytes / BLOCK,
        backend: model.backend,
      };
    });
  } finally {
    for (const { model } of loaded) await model.destroy();
  }
}

for (const ctx of CONTEXTS) {
  const ms = rows.map(() => []);
  const facts = [];
  for (let p = 1; p <= passes; p++) {
    say(
      `${ctx.name} context, pass ${p} of ${passes}: ${rows.length} models, ${ctx.prompt}-token prompt, ${steps} steps each`,
    );
    await pass(ctx, ms, facts);
  }
  for (let i = 0; i < rows.length; i++) {
    const vsBase = ms[i].map((m, s) => ms[0][s] / m);
    console.log(
      JSON.stringify({
        context: ctx.name,
        prompt_tokens: ctx.prompt,
        decode_positions: [ctx.prompt + 1, ctx.prompt + steps],
        table: rows[i].table,
        row: rows[i].row,
        model: relative(repo, rows[i].model),
        kv_dtype: rows[i].kv,
        ...facts[i],
        decode_tok_s: 1000 / median(ms[i]),
        step_ms_median: median(ms[i]),
        step_ms_mean: ms[i].reduce((a, b) => a + b, 0) / ms[i].length,
        relative_to_f16_mha: median(vsBase),
        steps,
        passes,
      }),
    );
  }
}
