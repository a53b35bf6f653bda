// GGML block formats on the CPU: accuracy on Gaussian weights, and the speed of dequantizing
// and of a matrix-vector product straight from the blocks (ggmlMatVec), per type.
// `pnpm --filter @kvasir/quantizer bench:ggml --json` prints one JSON object.

import { GGML_BLOCK_FORMATS, type GgmlBlockType, ggmlMatVec } from '../src/ggml/index.js';
import { gaussian } from '../src/synthetic.test-util.js';

const json = process.argv.includes('--json');
const ROWS = 1024;
const COLS = 2048;
const w = gaussian(ROWS * COLS, 1);
const x = gaussian(COLS, 2);

/** Best wall time of `runs` calls of `fn`, in milliseconds. */
function best(runs: number, fn: () => void): number {
  let t = Number.POSITIVE_INFINITY;
  for (let r = 0; r < runs; r++) {
    const s = performance.now();
    fn();
    t = Math.min(t, performance.now() - s);
  }
  return t;
}

const rows: Record<string, unknown>[] = [];
for (const name of Object.keys(GGML_BLOCK_FORMATS) as GgmlBlockType[]) {
  const f = GGML_BLOCK_FORMATS[name];
  const bytes = new Uint8Array(((ROWS * COLS) / f.blockSize) * f.bytesPerBlock);
  const quantizeMs = best(1, () => f.quantize(w, 0, bytes, 0, w.length));
  const back = new Float32Array(w.length);
  const dequantizeMs = best(5, () => f.dequantize(bytes, 0, back, 0, w.length));
  let se = 0;
  let sx = 0;
  for (let i = 0; i < w.length; i++) {
    se += (w[i]! - back[i]!) ** 2;
    sx += w[i]! ** 2;
  }
  const y = new Float32Array(ROWS);
  const matVecMs = best(5, () => ggmlMatVec(name, bytes, 0, ROWS, COLS, x, 0, y, 0));
  rows.push({
    type: name,
    bitsPerWeight: f.bitsPerWeight,
    relativeRmsError: Number(Math.sqrt(se / sx).toPrecision(4)),
    quantizeMWeightsPerS: Number((w.length / quantizeMs / 1e3).toFixed(1)),
    dequantizeMWeightsPerS: Number((w.length / dequantizeMs / 1e3).toFixed(1)),
    matVecMWeightsPerS: Number((w.length / matVecMs / 1e3).toFixed(1)),
  });
}
const report = { shape: { rows: ROWS, cols: COLS }, node: process.version, formats: rows };
if (json) console.log(JSON.stringify(report));
else console.table(rows);
