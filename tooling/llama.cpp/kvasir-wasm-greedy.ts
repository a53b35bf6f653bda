// Greedy decoding on Kvasir's wasm backend from given prompt token ids, split over several
// WebAssembly memories as `kvasir serve --backend wasm` splits a model one memory does not hold
// (wasmPlacement). The counterpart of llama-greedy (greedy.cpp) for compare-wasm-7b.sh.
//   tsx kvasir-wasm-greedy.ts <model.gguf> <threads> <n> <prompt token ids, comma-separated>
// {"tokens":[...],"margins":[...],"devices":[...]}
import { kvCacheSpec } from '../../packages/model/src/execution/kv-cache.js';
import { openCheckpoint } from '../../packages/model/src/formats/open-checkpoint.js';
import { loadModel } from '../../packages/model/src/model/model.js';
import { wasmPlacement } from '../../packages/model/src/model/placement.js';

const [path, threadsArg, nArg, idsArg] = process.argv.slice(2);
if (!path || !idsArg) {
  throw new Error('usage: kvasir-wasm-greedy.ts <model.gguf> <threads> <n> <ids,...>');
}
const threads = Number(threadsArg);
const n = Number(nArg);
const ids = idsArg.split(',').map(Number);
const blockSize = 16;
const blocks = Math.ceil((ids.length + n) / blockSize) + 1;
const kvFormat = 'f32';
const reader = await openCheckpoint(path);
const perLayer =
  kvCacheSpec(reader.config, { kvFormat, blockSize, numBlocks: blocks }).blockWords * 4 * blocks;
const devices = wasmPlacement(reader, { kvBytesPerLayer: perLayer, threads });
const model = await loadModel(reader, {
  backend: 'wasm',
  threads,
  numBlocks: blocks,
  blockSize,
  kvFormat,
  ...(devices.length > 1 ? { devices } : {}),
});
const table = Array.from({ length: blocks }, (_, i) => i);
const slot = (p: number) => Math.floor(p / blockSize) * blockSize + (p % blockSize);
const tokens: number[] = [];
const margins: number[] = [];
let step = Int32Array.from(ids);
let at = 0;
for (let s = 0; s < n; s++) {
  const len = step.length;
  const logits = await model.forward({
    tokenIds: step,
    positions: Int32Array.from({ length: len }, (_, i) => at + i),
    slotMapping: Int32Array.from({ length: len }, (_, i) => slot(at + i)),
    rows: [{ queryStart: 0, queryLen: len, contextLen: at + len, blockTable: table }],
    logitsIndices: Int32Array.of(len - 1),
  });
  at += len;
  let best = 0;
  for (let i = 1; i < logits.length; i++)
    if ((logits[i] as number) > (logits[best] as number)) best = i;
  let second = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < logits.length; i++) {
    if (i !== best && (logits[i] as number) > second) second = logits[i] as number;
  }
  tokens.push(best);
  margins.push((logits[best] as number) - second);
  step = Int32Array.of(best);
}
await model.destroy();
await reader.close();
console.log(
  JSON.stringify({
    tokens,
    margins,
    devices: model.devices.map(
      (d) => `${d.backend} layers ${d.firstLayer}-${d.firstLayer + d.numLayers - 1}`,
    ),
  }),
);
