// Where a wasm step's time goes: one GGUF on the wasm backend, each step run one op at a time
// (wasm-executor's `profile`), milliseconds per op kind for decode at batch 1 and 8 and for a
// 512-token prefill. Each op then pays one wake-up of the threads; `wakeup_ms` is that cost
// (as many empty one-op programs), already subtracted from each kind in proportion to its calls.
//   tsx bench/wasm-profile.ts <model.gguf> [threads] [rounds]
// Prints one JSON object.
import { createWasmExecutor } from '../src/backends/wasm/wasm-executor.js';
import type { WasmOpProfile } from '../src/backends/wasm/wasm-runtime.js';
import { type ForwardPlan, normalizePlan } from '../src/execution/forward-plan.js';
import { kvCacheSpec } from '../src/execution/kv-cache.js';
import { openCheckpoint } from '../src/formats/open-checkpoint.js';
import { BLOCK, decodePlan, prefillPlan } from './plans.js';

const [path, threadsArg = '2', roundsArg = '3'] = process.argv.slice(2);
if (!path) throw new Error('usage: wasm-profile.ts <model.gguf> [threads] [rounds]');
const threads = Number(threadsArg);
const rounds = Number(roundsArg);
const reader = await openCheckpoint(path);
const config = reader.config;
// Blocks: the decode plans' shared prefix and 8 sequences, then a 512-token prompt.
const numBlocks = 1 + 8 + 512 / BLOCK + 1;
const kv = kvCacheSpec(config, { kvFormat: 'f16', blockSize: BLOCK, numBlocks });
const profile: WasmOpProfile = { ms: new Map(), calls: new Map(), ops: 0, empty: 0 };
const exec = await createWasmExecutor({ reader, kv, weights: {} }, { threads, profile });
const limits = {
  vocabSize: config.vocabSize,
  numBlocks,
  blockSize: BLOCK,
  maxPosition: config.maxPositionEmbeddings,
};
const run = (p: ForwardPlan) => exec.forward(normalizePlan(p, limits));

/** Per-kind milliseconds per step of `plans`, wake-ups subtracted, and the step's total. */
async function profileOf(plans: ForwardPlan[]): Promise<Record<string, number>> {
  profile.ms.clear();
  profile.calls.clear();
  profile.ops = 0;
  profile.empty = 0;
  for (const p of plans) await run(p);
  const perOp = profile.empty / Math.max(profile.ops, 1);
  const out: Record<string, number> = {};
  let total = 0;
  for (const [k, ms] of profile.ms) {
    const v = (ms - perOp * (profile.calls.get(k) ?? 0)) / plans.length;
    out[k] = Number(v.toFixed(3));
    total += v;
  }
  out.total_ms = Number(total.toFixed(3));
  out.wakeup_ms = Number((profile.empty / plans.length).toFixed(3));
  return out;
}

// Warm up: a prefix block for the decode plans, one of each step.
await run(prefillPlan(BLOCK, 0));
await run(decodePlan(1, 0));
await run(decodePlan(8, 0));
const result: Record<string, Record<string, number>[]> = { decode1: [], decode8: [], pp512: [] };
for (let r = 0; r < rounds; r++) {
  result.decode1!.push(await profileOf([1, 2, 3, 4].map((s) => decodePlan(1, s))));
  result.decode8!.push(await profileOf([1, 2].map((s) => decodePlan(8, s))));
  result.pp512!.push(await profileOf([prefillPlan(512, 9)]));
}
await exec.destroy();
await reader.close();
/** The round with the smallest total (the least disturbed on a shared machine). */
const best = (xs: Record<string, number>[]) =>
  xs.reduce((a, b) => ((a.total_ms as number) <= (b.total_ms as number) ? a : b));
console.log(
  JSON.stringify({
    model: path,
    threads,
    rounds,
    decode1: best(result.decode1!),
    decode8: best(result.decode8!),
    pp512: best(result.pp512!),
  }),
);
