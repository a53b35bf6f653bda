// Decode speed of GGUF block weights against f16 on the CPU backend (and WebGPU with
// --webgpu): a random Llama converted to GGUF in each type, 8 timed decode steps after a
// 16-token prompt and one untimed step. `pnpm --filter @kvasir/model bench:ggml --json` prints one JSON object.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeModelConfig } from '../src/config.js';
import type { TensorDtype } from '../src/formats/dtype.js';
import { convertToGguf } from '../src/formats/gguf/convert.js';
import { openGgufCheckpoint } from '../src/formats/gguf/reader.js';
import { writeRandomCheckpoint } from '../src/formats/random-checkpoint.js';
import { summarizeWeights } from '../src/formats/weight-summary.js';
import { loadModel } from '../src/model/model.js';

const json = process.argv.includes('--json');
const backend = process.argv.includes('--webgpu') ? 'webgpu' : 'cpu';
const TYPES: TensorDtype[] = ['F16', 'Q8_0', 'Q6_K', 'Q4_K', 'Q4_0'];
const STEPS = 8;

const config = makeModelConfig({
  hiddenSize: 512,
  intermediateSize: 1536,
  numLayers: 4,
  numHeads: 8,
  numKvHeads: 8,
  vocabSize: 4096,
  maxPositionEmbeddings: 256,
});

const root = await mkdtemp(join(tmpdir(), 'kvasir-bench-ggml-'));
const results: Record<string, unknown>[] = [];
try {
  await writeRandomCheckpoint(join(root, 'hf'), config, 3);
  for (const dtype of TYPES) {
    const file = join(root, `${dtype}.gguf`);
    await convertToGguf(join(root, 'hf'), file, { dtype, withoutTokenizer: true });
    const reader = await openGgufCheckpoint(file);
    const summary = summarizeWeights(reader);
    await reader.close();
    const model = await loadModel(file, { backend, numBlocks: 4, blockSize: 16, kvFormat: 'f32' });
    const prompt = Array.from({ length: 16 }, (_, i) => (i * 37 + 11) % config.vocabSize);
    const step = (tokens: number[], start: number) =>
      model.forward({
        tokenIds: Int32Array.from(tokens),
        positions: Int32Array.from(tokens, (_, i) => start + i),
        slotMapping: Int32Array.from(tokens, (_, i) => start + i),
        rows: [
          {
            queryStart: 0,
            queryLen: tokens.length,
            contextLen: start + tokens.length,
            blockTable: [0, 1],
          },
        ],
        logitsIndices: Int32Array.of(tokens.length - 1),
      });
    await step(prompt, 0);
    // One untimed decode step: it compiles the matrix-vector pipelines on WebGPU.
    await step([1], prompt.length);
    const t0 = performance.now();
    for (let s = 1; s <= STEPS; s++) await step([s + 1], prompt.length + s);
    const seconds = (performance.now() - t0) / 1000;
    await model.destroy();
    results.push({
      dtype,
      bits_per_weight: Number(summary.bitsPerWeight.toFixed(4)),
      weight_bytes: summary.bytes,
      decode_tok_s: Number((STEPS / seconds).toFixed(3)),
      weight_gb_s: Number(((summary.bytes * STEPS) / seconds / 1e9).toFixed(4)),
    });
    if (!json) console.log(JSON.stringify(results.at(-1)));
  }
} finally {
  await rm(root, { recursive: true, force: true });
}
const f16 = results.find((r) => r.dtype === 'F16')?.decode_tok_s as number;
const report = {
  backend,
  config: { hidden: 512, intermediate: 1536, layers: 4, vocab: 4096 },
  results,
  speedup_vs_f16: Object.fromEntries(
    results.map((r) => [r.dtype, Number(((r.decode_tok_s as number) / f16).toFixed(3))]),
  ),
};
if (json) console.log(JSON.stringify(report));
