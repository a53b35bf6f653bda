// dequantize(quantize(x)) stays within each format's error bound, on random rows of one
// k-quant super-block (256 weights = eight 32-blocks): uniform values at magnitudes from 1e-2 to
// 1e3, with an outlier, and 16-weight sub-blocks of different magnitudes.
//
// Legacy formats: the bound follows from the format. Half a step (Q4_1 / Q5_1 / Q8_0), or a
// whole step for the symmetric 4/5-bit ones (Q4_0: d = max / −8 gives the opposite extreme
// code 8, clipped to 7), plus the f16 rounding of the stored scale and minimum (2^-11 relative,
// times the largest code). Fitted formats (IQ4_NL and the k-quants search their scales by least
// squares, then quantize the sub-block scales again, so no closed form applies): about 1.25×
// the worst error in 3,000 rows of this generator (Q2_K 0.599 of the super-block's range,
// Q3_K 0.125, Q4_K 0.040, Q5_K 0.024, Q6_K 0.015; IQ4_NL 0.156 of the block's absolute maximum).
// Q2_K's is large because a sub-block 100× smaller than the largest loses its 4-bit scale to
// zero and decodes to its 4-bit minimum alone; ggml's C reference does the same, bit for bit.

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { GGML_BLOCK_FORMATS, type GgmlBlockType } from './types.js';

const U = 2 ** -11; // f16's relative rounding error
const ABS = 2 ** -16; // slack for a scale that lands in f16's subnormals (tiny blocks)

/** The largest error allowed for a block with absolute maximum `amax` and range `range`. */
const BOUNDS: Record<GgmlBlockType, (amax: number, range: number) => number> = {
  Q4_0: (amax) => (amax / 8) * (1 + 8 * U),
  Q5_0: (amax) => (amax / 16) * (1 + 16 * U),
  Q4_1: (amax, range) => range / 30 + (range + amax) * U,
  Q5_1: (amax, range) => range / 62 + (range + amax) * U,
  Q8_0: (amax) => amax * (1 / 254 + U),
  IQ4_NL: (amax) => 0.2 * amax,
  // A power-of-two scale puts amax at 8-16 units of the codes 0-12: clipped to 12 (amax < 16) or
  // half the widest gap (8 to 12), both at most amax / 4.
  MXFP4: (amax) => 0.25 * amax,
  Q2_K: (_, range) => 0.75 * range,
  Q3_K: (_, range) => 0.16 * range,
  Q4_K: (_, range) => 0.05 * range,
  Q5_K: (_, range) => 0.03 * range,
  Q6_K: (_, range) => 0.019 * range,
};

const row = (magnitudes: readonly number[]) =>
  fc
    .record({
      values: fc.array(fc.float({ min: -1, max: 1, noNaN: true, noDefaultInfinity: true }), {
        minLength: 256,
        maxLength: 256,
      }),
      exponent: fc.integer({ min: -2, max: 3 }),
      // Per-16 sub-block magnitudes (k-quants fit each sub-block's scale against the largest).
      subScales: fc.array(fc.constantFrom(...magnitudes), { minLength: 16, maxLength: 16 }),
      outlier: fc.option(
        fc.record({ at: fc.nat(255), value: fc.double({ min: -40, max: 40, noNaN: true }) }),
      ),
    })
    .map(({ values, exponent, subScales, outlier }) => {
      const x = Float32Array.from(values, (v, i) => v * subScales[i >> 4]! * 10 ** exponent);
      if (outlier) x[outlier.at] = outlier.value * 10 ** exponent;
      return x;
    });

describe.each(Object.keys(GGML_BLOCK_FORMATS) as GgmlBlockType[])('%s round trip', (name) => {
  const f = GGML_BLOCK_FORMATS[name];

  /** Asserts |x − y| ≤ bound(amax, range) + ABS per ggml block (k-quants: per super-block). */
  const holds = (
    rows: fc.Arbitrary<Float32Array>,
    bound: (amax: number, range: number) => number,
  ) => {
    const q = new Uint8Array((256 / f.blockSize) * f.bytesPerBlock);
    const y = new Float32Array(256);
    const span = f.blockSize;
    fc.assert(
      fc.property(rows, (x) => {
        f.quantize(x, 0, q, 0, 256);
        f.dequantize(q, 0, y, 0, 256);
        for (let b = 0; b < 256; b += span) {
          let amax = 0;
          let lo = Number.POSITIVE_INFINITY;
          let hi = Number.NEGATIVE_INFINITY;
          for (let i = b; i < b + span; i++) {
            amax = Math.max(amax, Math.abs(x[i]!));
            lo = Math.min(lo, x[i]!);
            hi = Math.max(hi, x[i]!);
          }
          const limit = bound(amax, hi - lo) + ABS;
          for (let i = b; i < b + span; i++) {
            if (!(Math.abs(x[i]! - y[i]!) <= limit)) {
              throw new Error(`weight ${i}: ${x[i]} became ${y[i]}, bound ${limit}`);
            }
          }
        }
      }),
      { numRuns: 120 },
    );
  };

  it('dequantize(quantize(x)) is within the format bound of x', () => {
    holds(row([1, 0.5, 0.34, 3, 0.1, 0.01]), BOUNDS[name]);
  });

  it('keeps an all-zero row exactly zero', () => {
    const q = new Uint8Array((256 / f.blockSize) * f.bytesPerBlock).fill(0xa5);
    const y = new Float32Array(256).fill(1);
    f.quantize(new Float32Array(256), 0, q, 0, 256);
    f.dequantize(q, 0, y, 0, 256);
    expect(y.every((v) => v === 0)).toBe(true);
  });
});
