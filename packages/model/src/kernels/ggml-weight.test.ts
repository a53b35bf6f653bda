import { GGML_BLOCK_FORMATS, type GgmlBlockType } from '@kvasir/quantizer/ggml';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { matmulRef } from './reference.js';
import {
  type GgmlWeight,
  packWeight,
  unpackWeight,
  weightRowBytes,
  weightWords,
} from './weight-format.js';

/** A `rows × cols` matrix of random values quantized by ggml's reference quantizer. */
function ggmlWeight(type: GgmlBlockType, rows: number, cols: number, seed: number): GgmlWeight {
  let s = seed >>> 0;
  const values = Float32Array.from({ length: rows * cols }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return (s / 2 ** 32 - 0.5) * 2;
  });
  const data = new Uint32Array(weightWords(type, rows, cols));
  GGML_BLOCK_FORMATS[type].quantize(values, 0, new Uint8Array(data.buffer), 0, rows * cols);
  return { format: type, rows, cols, data, scales: undefined, groupSize: 0 };
}

describe('matmulRef over GGML blocks', () => {
  const types = Object.keys(GGML_BLOCK_FORMATS) as GgmlBlockType[];
  it.each(types.map((t) => [t]))(
    '%s equals the same weights decoded to f32, for every epilogue, bit for bit',
    (type) => {
      const bs = GGML_BLOCK_FORMATS[type].blockSize;
      fc.assert(
        fc.property(
          fc.integer({ min: 1, max: 3 }),
          fc.integer({ min: 1, max: 2 }),
          fc.integer({ min: 1, max: 4 }),
          fc.integer(),
          fc.constantFrom('store', 'residual', 'swiglu', 'swiglu-oai'),
          fc.boolean(),
          (m, blocksPerRow, halfRows, seed, epilogue, withBias) => {
            const rows = 2 * halfRows;
            const cols = blocksPerRow * bs;
            const w = ggmlWeight(type, rows, cols, seed);
            // Rows of Q4_0 etc. are 18·k bytes: the padding rule must hold for odd layouts.
            expect(w.data.byteLength).toBeGreaterThanOrEqual(rows * weightRowBytes(type, cols) + 4);
            const dense = packWeight(unpackWeight(w), rows, cols, 'f32');
            const x = Float32Array.from({ length: m * cols }, (_, i) => Math.sin(i + seed));
            const bias = withBias
              ? Float32Array.from({ length: rows }, (_, i) => i / 7)
              : undefined;
            const outCols = epilogue.startsWith('swiglu') ? rows / 2 : rows;
            const base = Float32Array.from({ length: m * outCols }, (_, i) => Math.cos(i));
            const run = (weight: GgmlWeight | typeof dense) =>
              matmulRef(x, m, weight, {
                epilogue,
                ...(bias ? { bias } : {}),
                ...(epilogue === 'residual' ? { out: base.slice() } : {}),
              });
            expect(run(w)).toEqual(run(dense));
          },
        ),
        { numRuns: 25 },
      );
    },
  );
});
