// Kvasir's side of compare-wasm.sh and compare-wasm-7b.sh: tg (decode, batch 1) and pp (one
// prompt) on the wasm backend for a GGUF file, as llama-bench measures them. A file whose
// weights and cache do not fit one 4 GiB WebAssembly memory is split by layer over several, by
// the same wasmPlacement `kvasir serve --backend wasm` uses. Prints one JSON line.
//   tsx kvasir-wasm-bench.ts <model.gguf> <threads> <pp tokens (0: none)> <tg tokens>
import { kvCacheSpec } from '../../packages/model/src/execution/kv-cache.js';
import { openCheckpoint } from '../../packages/model/src/formats/open-checkpoint.js';
import { loadModel } from '../../packages/model/src/model/model.js';
import { wasmPlacement } from '../../packages/model/src/model/placement.js';

const [path, threadsArg, ppArg, tgArg] = process.argv.slice(2);
if (!path) throw new Error('usage: kvasir-wasm-bench.ts <model.gguf> <threads> <pp> <tg>');
const threads = Number(threadsArg ?? 2);
const pp = Number(ppArg ?? 512);
const tg = Number(tgArg ?? 128);
const blockSize = 16;
const blocks = Math.ceil((Math.max(pp, 16) + tg) / blockSize) + 1;
const reader = await openCheckpoint(path);
const kvFormat = 'f16';
const perLayer =
  kvCacheSpec(reader.config, { kvFormat, blockSize, numBlocks: blocks }).blockWords * 4 * blocks;
const devices = wasmPlacement(reader, { kvBytesPerLayer: perLayer, threads });
const t0Load = performance.now();
const model = await loadModel(reader, {
  backend: 'wasm',
  threads,
  numBlocks: blocks,
  blockSize,
  kvFormat,
  ...(devices.length > 1 ? { devices } : {}),
});
const loadSecs = (performance.now() - t0Load) / 1000;
const table = Array.from({ length: blocks }, (_, i) => i);
const slot = (p: number) =>
  (table[Math.floor(p / blockSize)] as number) * blockSize + (p % blockSize);
const vocab = model.config.vocabSize;
const prompt = (n: number) => ({
  tokenIds: Int32Array.from({ length: n }, (_, i) => (i * 7 + 1) % vocab),
  positions: Int32Array.from({ length: n }, (_, i) => i),
  slotMapping: Int32Array.from({ length: n }, (_, i) => slot(i)),
  rows: [{ queryStart: 0, queryLen: n, contextLen: n, blockTable: table }],
  logitsIndices: Int32Array.of(n - 1),
});
// llama-bench's tg runs from an empty context; a one-token prompt stands in for it here.
await model.forward(prompt(16));
let ppSecs = 0;
if (pp > 0) {
  const t0 = performance.now();
  await model.forward(prompt(pp));
  ppSecs = (performance.now() - t0) / 1000;
}
await model.forward(prompt(1));
const t0 = performance.now();
for (let i = 1; i <= tg; i++) {
  await model.forward({
    tokenIds: Int32Array.of((i * 13) % vocab),
    positions: Int32Array.of(i),
    slotMapping: Int32Array.of(slot(i)),
    rows: [{ queryStart: 0, queryLen: 1, contextLen: i + 1, blockTable: table }],
    logitsIndices: Int32Array.of(0),
  });
}
const tgSecs = (performance.now() - t0) / 1000;
const rss = process.memoryUsage().rss;
await model.destroy();
await reader.close();
console.log(
  JSON.stringify({
    threads,
    pp,
    tg,
    pp_tok_s: pp > 0 ? pp / ppSecs : null,
    tg_tok_s: tg / tgSecs,
    load_s: loadSecs,
    rss_bytes: rss,
    devices: model.devices.map(
      (d) => `${d.backend} layers ${d.firstLayer}-${d.firstLayer + d.numLayers - 1}`,
    ),
  }),
);
