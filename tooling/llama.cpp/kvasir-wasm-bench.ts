// Kvasir's side of compare-wasm.sh: tg (decode, batch 1) and pp (one prompt) on the wasm
// backend for a GGUF file, as llama-bench measures them. Prints one JSON line.
//   tsx kvasir-wasm-bench.ts <model.gguf> <threads> <pp tokens> <tg tokens>
import { loadModel } from '../../packages/model/src/model/model.js';

const [path, threadsArg, ppArg, tgArg] = process.argv.slice(2);
if (!path) throw new Error('usage: kvasir-wasm-bench.ts <model.gguf> <threads> <pp> <tg>');
const threads = Number(threadsArg ?? 2);
const pp = Number(ppArg ?? 512);
const tg = Number(tgArg ?? 128);
const blockSize = 16;
const blocks = Math.ceil((pp + tg) / blockSize) + 1;
const model = await loadModel(path, {
  backend: 'wasm',
  threads,
  numBlocks: blocks,
  blockSize,
  kvFormat: 'f16',
});
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
let t0 = performance.now();
await model.forward(prompt(pp));
const ppSecs = (performance.now() - t0) / 1000;
await model.forward(prompt(1));
t0 = performance.now();
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
await model.destroy();
console.log(JSON.stringify({ threads, pp, tg, pp_tok_s: pp / ppSecs, tg_tok_s: tg / tgSecs }));
