// Checks an exported HF directory with Kvasir's own loader and CPU forward pass against the
// PyTorch model: logits at every position of a held-out snippet, the tokenizer round trip, and a
// greedy continuation.
//
// Usage (after `pnpm build` and export.py): node tooling/train/check_export.mjs
//   [--reference tooling/train/runs/<name>/hf-reference.json] [--tolerance 1e-3] [--json]
// Exits 1 when the largest logit difference exceeds the tolerance or the tokenizer round trip
// fails. The reference logits come from the weights as exported (f16 rounded), so f16 storage
// costs nothing here; what remains is f32 arithmetic in a different order and the f32 KV cache.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

const here = new URL('.', import.meta.url).pathname;
const { generate, loadModel, ModelTokenizer } = await import(
  join(here, '../../packages/model/dist/index.js')
);

const { values } = parseArgs({
  options: {
    reference: { type: 'string', default: join(here, 'runs/kvasir-mini-v1/hf-reference.json') },
    tolerance: { type: 'string', default: '1e-3' },
    json: { type: 'boolean', default: false },
  },
});
const ref = JSON.parse(readFileSync(values.reference, 'utf8'));
const tolerance = Number(values.tolerance);
const dir = ref.model_dir;
const ids = ref.ids;
const vocab = ref.vocab_size;
const refLogits = new Float32Array(readFileSync(ref.logits_file).buffer.slice(0));

const tok = await ModelTokenizer.load(dir);
const text = tok.decode(ids.slice(1));
const reencoded = tok.encode(text);
const roundTrip = reencoded.length === ids.length && reencoded.every((t, i) => t === ids[i]);

const blockSize = 16;
const numBlocks = Math.ceil((ids.length + ref.greedy.length + 1) / blockSize) + 1;
const model = await loadModel(dir, {
  backend: 'cpu',
  kvFormat: 'f32',
  weightDtype: 'f32',
  numBlocks,
  blockSize,
});
let maxAbsDiff = 0;
let top1Agree = 0;
let greedy = [];
try {
  const n = ids.length;
  const blockTable = Array.from({ length: Math.ceil(n / blockSize) }, (_, i) => i);
  const logits = await model.forward({
    tokenIds: Int32Array.from(ids),
    positions: Int32Array.from({ length: n }, (_, i) => i),
    slotMapping: Int32Array.from({ length: n }, (_, i) => i),
    rows: [{ queryStart: 0, queryLen: n, contextLen: n, blockTable }],
    logitsIndices: Int32Array.from({ length: n }, (_, i) => i),
  });
  for (let row = 0; row < n; row++) {
    let best = 0;
    let refBest = 0;
    for (let v = 0; v < vocab; v++) {
      const a = logits[row * vocab + v];
      const b = refLogits[row * vocab + v];
      maxAbsDiff = Math.max(maxAbsDiff, Math.abs(a - b));
      if (a > logits[row * vocab + best]) best = v;
      if (b > refLogits[row * vocab + refBest]) refBest = v;
    }
    if (best === refBest) top1Agree++;
  }
  greedy = await generate(model, ids, {
    maxNewTokens: ref.greedy.length,
    stopTokenIds: tok.eosTokenIds,
    firstBlock: 0,
  });
} finally {
  await model.destroy();
}
const greedyMatch =
  greedy.length === ref.greedy.length && greedy.every((t, i) => t === ref.greedy[i]);
const result = {
  model_dir: dir,
  step: ref.step,
  positions: ids.length,
  max_abs_logit_diff: maxAbsDiff,
  tolerance,
  top1_agreement: top1Agree / ids.length,
  tokenizer_round_trip: roundTrip,
  greedy_match: greedyMatch,
  prompt_tail: text.slice(-160),
  kvasir_greedy: tok.decode(greedy),
  pytorch_greedy: tok.decode(ref.greedy),
};
if (values.json) console.log(JSON.stringify(result, null, 2));
else for (const [k, v] of Object.entries(result)) console.log(`${k}: ${JSON.stringify(v)}`);
process.exitCode = maxAbsDiff <= tolerance && roundTrip ? 0 : 1;
