// What to do with F16 weights on the wasm backend: multiply them as stored (f16 widened to f32
// in registers per use, the default), widen them to f32 once at load (`weightDtype: 'f32'`,
// twice the memory), or quantize them to int8 with group scales at load (`weightQuant: 'int8'`,
// about half). One F16 GGUF, the three loaded side by side, decode (batch 1) and a prefill timed
// in alternation for `rounds` rounds; medians, and each option's weight bytes.
//   tsx bench/f16-options.ts <model-F16.gguf> [threads] [rounds] [pp] [tg]
// Prints one JSON object.
import type { LoadModelOptions } from '../src/model/model.js';
import { loadModel } from '../src/model/model.js';
import { BLOCK, prefillPlan } from './plans.js';

const [path, threadsArg = '2', roundsArg = '3', ppArg = '128', tgArg = '32'] =
  process.argv.slice(2);
if (!path) throw new Error('usage: f16-options.ts <model-F16.gguf> [threads] [rounds] [pp] [tg]');
const threads = Number(threadsArg);
const pp = Number(ppArg);
const tg = Number(tgArg);
const numBlocks = Math.ceil((pp + tg) / BLOCK) + 1;
const OPTIONS: Record<string, Partial<LoadModelOptions>> = {
  f16_widen_per_use: {},
  f32_at_load: { weightDtype: 'f32' },
  int8_at_load: { weightQuant: 'int8', groupSize: 32 },
};
const models = [];
for (const [name, o] of Object.entries(OPTIONS)) {
  const model = await loadModel(path, {
    backend: 'wasm',
    threads,
    numBlocks,
    blockSize: BLOCK,
    kvFormat: 'f16',
    ...o,
  });
  models.push({ name, model, pp: [] as number[], tg: [] as number[] });
}
const table = Array.from({ length: numBlocks }, (_, i) => i);
const median = (v: number[]) => [...v].sort((a, b) => a - b)[v.length >> 1] as number;
for (let r = 0; r < Number(roundsArg); r++) {
  for (let i = 0; i < models.length; i++) {
    const m = models[(r + i) % models.length] as (typeof models)[number];
    let t0 = performance.now();
    await m.model.forward(prefillPlan(pp, 0));
    m.pp.push(pp / ((performance.now() - t0) / 1000));
    t0 = performance.now();
    for (let s = 0; s < tg; s++) {
      const pos = pp + s;
      await m.model.forward({
        tokenIds: Int32Array.of((s * 13) % 1000),
        positions: Int32Array.of(pos),
        slotMapping: Int32Array.of(pos),
        rows: [{ queryStart: 0, queryLen: 1, contextLen: pos + 1, blockTable: table }],
        logitsIndices: Int32Array.of(0),
      });
    }
    m.tg.push(tg / ((performance.now() - t0) / 1000));
  }
}
const out: Record<string, unknown> = { model: path, threads, rounds: Number(roundsArg), pp, tg };
for (const m of models) {
  out[m.name] = {
    pp_tok_s: median(m.pp),
    tg_tok_s: median(m.tg),
    pp_rounds: m.pp,
    tg_rounds: m.tg,
  };
  await m.model.destroy();
}
console.log(JSON.stringify(out));
