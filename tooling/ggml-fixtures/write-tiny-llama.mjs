// Writes a tiny random Llama as an F32 GGUF with @kvasir/model (built: `pnpm --filter
// @kvasir/model... build`): a seeded Hugging Face checkpoint (byte-level BPE tokenizer), then
// convertToGguf. Every 2-D weight's rows are 256 long (hidden and MLP widths 256), so
// llama-quantize uses the k-quants themselves, not its fallbacks for rows that are not a
// multiple of QK_K.
//   node tooling/ggml-fixtures/write-tiny-llama.mjs <out.gguf> [workdir]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { convertToGguf } from '../../packages/model/dist/formats.js';
import { writeRandomCheckpoint } from '../../packages/model/dist/index.js';

const [out, work] = process.argv.slice(2);
if (!out) {
  console.error('usage: write-tiny-llama.mjs <out.gguf> [workdir]');
  process.exit(2);
}
/** @type {import('../../packages/model/dist/index.js').ModelConfig} */
const config = {
  architecture: 'llama',
  hiddenSize: 256,
  intermediateSize: 256,
  numLayers: 1,
  numHeads: 4,
  numKvHeads: 2,
  headDim: 64,
  vocabSize: 320,
  rmsNormEps: 1e-5,
  ropeTheta: 10000,
  ropeScaling: null,
  maxPositionEmbeddings: 256,
  tieWordEmbeddings: false,
  attentionBias: false,
  attentionOutputBias: false,
  slidingWindow: null,
  bosTokenId: null,
  eosTokenIds: [],
};
const dir = work ?? mkdtempSync(join(tmpdir(), 'tiny-llama-'));
await writeRandomCheckpoint(dir, config, 19);
await convertToGguf(dir, out);
if (!work) rmSync(dir, { recursive: true, force: true });
console.log(`wrote ${out}`);
