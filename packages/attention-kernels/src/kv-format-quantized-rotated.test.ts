// Properties of the Hadamard-rotated formats on the CPU (their GPU twins are checked word for
// word and element for element against these in kv-format-quantized.test.ts).

import { bitsToF32 } from '@kvasir/quantizer';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { int4H32KvFormat, int8H8KvFormat } from './kv-format-quantized-rotated.js';

/** A row of `headDim` values: unit-scale noise plus a few outlier channels up to ±`big`. */
const rowArb = (headDim: number) =>
  fc
    .tuple(
      fc.array(fc.float({ min: -3, max: 3, noNaN: true }), {
        minLength: headDim,
        maxLength: headDim,
      }),
      fc.array(fc.tuple(fc.nat(headDim - 1), fc.float({ min: -200, max: 200, noNaN: true })), {
        maxLength: 6,
      }),
    )
    .map(([base, outliers]) => {
      const row = Float32Array.from(base);
      for (const [c, v] of outliers) row[c] = v;
      return row;
    });

/** Euclidean norm of `a − b` over `[from, to)`. */
function l2(a: Float32Array, b: Float32Array, from: number, to: number): number {
  let s = 0;
  for (let i = from; i < to; i++) s += (a[i]! - b[i]!) ** 2;
  return Math.sqrt(s);
}

describe('rotated formats: the error of each rotation run is bounded by its scale', () => {
  // The rotation is orthogonal up to the factor n that decoding removes, so a run's decoding
  // error has the Euclidean norm of its code rounding errors (each ≤ scale / 2) divided by √n:
  // at most scale / 2 for the whole run, wherever its outliers are.
  it('int8-h8: ‖x̂ − x‖ ≤ scale / 2 per 8 channels (scale: the row scale)', () => {
    fc.assert(
      fc.property(fc.constantFrom(8, 64, 128), fc.integer({ min: 1, max: 16 }), (d, b) => {
        fc.assert(
          fc.property(rowArb(d), fc.nat(b - 1), (row, t) => {
            const cache = new Uint32Array(int8H8KvFormat.rowWords(d) * b + 16);
            int8H8KvFormat.encodeRow(cache, 0, t, row, b);
            const out = new Float32Array(d);
            int8H8KvFormat.decodeRow(cache, 0, t, out, b);
            const scale = bitsToF32(cache[(d / 4) * b + t]!);
            for (let r = 0; r < d; r += 8) {
              expect(l2(row, out, r, r + 8)).toBeLessThanOrEqual(scale * 0.5 * (1 + 1e-4) + 1e-6);
            }
          }),
          { numRuns: 10 },
        );
      }),
      { numRuns: 6 },
    );
  });

  it('int4-g32-h32: ‖x̂ − x‖ ≤ 3/4 · scale per group of 32 (a clamp at the range ends adds < scale / 2)', () => {
    fc.assert(
      fc.property(fc.constantFrom(32, 64, 128), fc.integer({ min: 1, max: 16 }), (d, b) => {
        fc.assert(
          fc.property(rowArb(d), fc.nat(b - 1), (row, t) => {
            const rw = d / 8;
            const cache = new Uint32Array(rw * b + int4H32KvFormat.scaleWordsPerSlab(b, d));
            int4H32KvFormat.encodeRow(cache, 0, t, row, b);
            const out = new Float32Array(d);
            int4H32KvFormat.decodeRow(cache, 0, t, out, b);
            for (let g = 0; g < d / 32; g++) {
              const scale = bitsToF32(cache[rw * b + t * (d / 16) + 2 * g]!);
              expect(l2(row, out, 32 * g, 32 * g + 32)).toBeLessThanOrEqual(scale * 0.75 + 1e-6);
            }
          }),
          { numRuns: 10 },
        );
      }),
      { numRuns: 6 },
    );
  });
});
