import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { llamaCppPermute } from '../../testing/llama-cpp.js';
import { permuteQkRows, unpermuteQkRows } from './qk-permute.js';

const shape = fc.record({
  heads: fc.integer({ min: 1, max: 4 }),
  halfHeadDim: fc.integer({ min: 1, max: 8 }),
  cols: fc.integer({ min: 1, max: 6 }),
});

describe('Q/K row permutation', () => {
  it("is llama.cpp's reshape/swapaxes, and unpermuteQkRows undoes it on the bytes of any dtype", () => {
    fc.assert(
      fc.property(shape, fc.integer({ min: 1, max: 4 }), ({ heads, halfHeadDim, cols }, bpe) => {
        const headDim = 2 * halfHeadDim;
        const rows = heads * headDim;
        const w = Float32Array.from({ length: rows * cols }, (_, i) => i);
        const permuted = permuteQkRows(w, rows, headDim);
        expect(permuted).toEqual(llamaCppPermute(w, rows, heads));
        // Rows as opaque bytes (bpe bytes per element, as a quantized row would be).
        const rowBytes = cols * bpe;
        const bytes = Uint8Array.from({ length: rows * rowBytes }, (_, i) => i % 251);
        const stored = new Uint8Array(bytes.length);
        for (let r = 0; r < rows; r++) {
          const src = permuted[r * cols]! / cols; // the canonical row now stored at row r
          stored.set(bytes.subarray(src * rowBytes, (src + 1) * rowBytes), r * rowBytes);
        }
        expect(unpermuteQkRows(stored, rowBytes, headDim)).toEqual(bytes);
      }),
    );
  });
});
