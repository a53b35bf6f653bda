import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { QuantizerError } from './errors.js';
import { hadamardF32, isHadamardSize } from './hadamard.js';
import { compareTensors } from './metrics.js';
import { dequantize, quantize } from './quantize.js';
import { gaussian, keysWithOutliers } from './synthetic.test-util.js';

const SIZES = [8, 16, 32, 64, 128] as const;

/** The Sylvester Hadamard matrix entry, from its definition (not from the butterfly). */
const entry = (i: number, j: number): number => {
  let b = i & j;
  let parity = 0;
  while (b !== 0) {
    parity ^= b & 1;
    b >>>= 1;
  }
  return parity === 0 ? 1 : -1;
};

describe('hadamardF32', () => {
  it.each(SIZES)('equals the matrix product H·x on integers (size %i)', (size) => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: -1000, max: 1000 }), { minLength: size, maxLength: size }),
        (v) => {
          const x = Float32Array.from(v);
          hadamardF32(x, size);
          for (let i = 0; i < size; i++) {
            let s = 0;
            for (let j = 0; j < size; j++) s += entry(i, j) * v[j]!;
            expect(x[i]).toBe(s);
          }
        },
      ),
      { numRuns: 20 },
    );
  });

  it('applied twice multiplies by the size (integers, exact), run by run', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...SIZES),
        fc.integer({ min: 1, max: 3 }),
        fc.integer({ min: 0, max: 2 ** 20 }),
        (size, runs, seed) => {
          const v = Float32Array.from(gaussian(size * runs, seed), (g) => Math.round(g * 100));
          const x = Float32Array.from(v);
          hadamardF32(x, size);
          hadamardF32(x, size);
          for (let i = 0; i < v.length; i++) expect(x[i]! + 0).toBe(v[i]! * size + 0);
        },
      ),
      { numRuns: 50 },
    );
  });

  it('rounds every sum to f32 (a small element next to a large one is lost, not kept in f64)', () => {
    const x = new Float32Array(8);
    x[0] = 2 ** 24;
    x[1] = 1;
    hadamardF32(x, 8);
    // 2^24 + 1 is not an f32: it rounds to 2^24 (even), 2^24 − 1 is exact.
    expect(x[0]).toBe(2 ** 24);
    expect(x[1]).toBe(2 ** 24 - 1);
  });

  it('transforms only the given range', () => {
    const x = Float32Array.from({ length: 24 }, (_, i) => i + 1);
    hadamardF32(x, 8, 8, 8);
    expect(Array.from(x.subarray(0, 8))).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect(Array.from(x.subarray(16))).toEqual([17, 18, 19, 20, 21, 22, 23, 24]);
    expect(x[8]).toBe(9 + 10 + 11 + 12 + 13 + 14 + 15 + 16);
  });

  it('rejects bad sizes and ranges with typed errors', () => {
    const x = new Float32Array(16);
    const code = (f: () => void): string | undefined => {
      try {
        f();
      } catch (e) {
        return QuantizerError.isInstance(e) ? e.code : 'other';
      }
      return undefined;
    };
    expect(code(() => hadamardF32(x, 4))).toBe('BAD_GROUP_SIZE');
    expect(code(() => hadamardF32(x, 32))).toBe('BAD_GROUP_SIZE');
    expect(code(() => hadamardF32(x, 8, 0, 12))).toBe('BAD_GROUP_SIZE');
    expect(code(() => hadamardF32(x, 8, 16, 8))).toBe('BAD_SHAPE');
    expect(isHadamardSize(24)).toBe(false);
  });
});

describe('quantize with a rotation', () => {
  const shape = { tokens: 64, heads: 2, headDim: 128 };
  const keys = keysWithOutliers(shape.tokens, shape.heads, shape.headDim, 3, 32, 8);

  it('undoes the rotation on dequantize (int8 per row of Gaussian values)', () => {
    const x = gaussian(shape.tokens * shape.heads * shape.headDim, 4);
    const spec = { format: 'int8', granularity: { kind: 'per-token-head' }, rotation: 8 } as const;
    const y = dequantize(quantize(x, spec, shape));
    expect(compareTensors(x, y).cosine).toBeGreaterThan(0.9999);
  });

  it.each([
    ['int8 per row, rotation 8', { format: 'int8', granularity: { kind: 'per-token-head' } }, 8],
    [
      'int4 group 32, rotation 32',
      { format: 'int4', granularity: { kind: 'group', groupSize: 32 } },
      32,
    ],
  ] as const)(
    '%s: smaller key error than without, on keys with outlier channels',
    (_n, spec, rotation) => {
      const plain = compareTensors(keys, dequantize(quantize(keys, spec, shape)));
      const rotated = compareTensors(
        keys,
        dequantize(quantize(keys, { ...spec, rotation }, shape)),
      );
      // Spreading the 8× outliers over their run narrows every group's range: ≥ 3 dB less error.
      expect(rotated.snrDb).toBeGreaterThan(plain.snrDb + 3);
    },
  );

  it('keeps the layout: same bytes, same scale count as the unrotated spec', () => {
    const spec = { format: 'int4', granularity: { kind: 'group', groupSize: 32 } } as const;
    const a = quantize(keys, spec, shape);
    const b = quantize(keys, { ...spec, rotation: 32 }, shape);
    expect(b.data.length).toBe(a.data.length);
    expect(b.scales.length).toBe(a.scales.length);
    expect(b.spec.rotation).toBe(32);
  });

  it('rejects a rotation that does not divide the head dim, or with static or per-channel scales', () => {
    const x = new Float32Array(2 * 1 * 24);
    const s24 = { tokens: 2, heads: 1, headDim: 24 };
    const codeOf = (f: () => void): string | undefined => {
      try {
        f();
      } catch (e) {
        return QuantizerError.isInstance(e) ? e.code : 'other';
      }
      return undefined;
    };
    expect(
      codeOf(() =>
        quantize(x, { format: 'int8', granularity: { kind: 'per-token-head' }, rotation: 16 }, s24),
      ),
    ).toBe('BAD_GROUP_SIZE');
    const y = new Float32Array(2 * 64);
    const s64 = { tokens: 2, heads: 1, headDim: 64 };
    expect(
      codeOf(() =>
        quantize(
          y,
          { format: 'int8', granularity: { kind: 'per-tensor', scale: 1 }, rotation: 8 },
          s64,
        ),
      ),
    ).toBe('UNSUPPORTED_GRANULARITY');
    expect(
      codeOf(() =>
        quantize(
          y,
          { format: 'int4', granularity: { kind: 'per-channel', groupSize: 2 }, rotation: 8 },
          s64,
        ),
      ),
    ).toBe('UNSUPPORTED_GRANULARITY');
    expect(
      codeOf(() => quantize(y, { format: 'f16', granularity: { kind: 'none' }, rotation: 8 }, s64)),
    ).toBe('UNSUPPORTED_GRANULARITY');
  });
});
