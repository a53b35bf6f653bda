import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  int4Decode,
  int4Encode,
  int4ScaleFromRange,
  int4ZeroPoint,
  int8Decode,
  int8Encode,
  inverseScale,
  roundHalfEven,
} from './integer.js';

describe('roundHalfEven', () => {
  it('sends halves to the even neighbour, like WGSL round', () => {
    expect([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999, 2.5001].map(roundHalfEven)).toEqual([
      0, 2, 2, -0, -2, -2, 2, 3,
    ]);
  });
});

describe('int8', () => {
  it('is symmetric and saturates at ±127', () => {
    expect(int8Encode(1000, 1)).toBe(127);
    expect(int8Encode(-1000, 1)).toBe(-127);
    expect(int8Encode(Number.POSITIVE_INFINITY, 0.5)).toBe(127);
    expect(int8Encode(Number.NaN, 1)).toBe(0);
    expect(int8Encode(Number.POSITIVE_INFINITY, 0)).toBe(0);
    expect(int8Encode(-3.5, 1)).toBe(-4);
  });
  it('reconstructs within half a step', () => {
    fc.assert(
      fc.property(
        fc.float({ min: Math.fround(1e-3), max: Math.fround(1e3), noNaN: true }),
        fc.float({ min: -1, max: 1, noNaN: true }),
        (scale, t) => {
          const x = Math.fround(t * 127 * scale);
          const q = int8Encode(x, inverseScale(scale));
          return Math.abs(int8Decode(q, scale) - x) <= scale * 0.5 * (1 + 1e-5);
        },
      ),
    );
  });
});

describe('int4', () => {
  it('clamps into 0..15 around the zero point and sends NaN to code 0', () => {
    expect(int4Encode(-5, 1, 0)).toBe(0);
    expect(int4Encode(100, 1, 0)).toBe(15);
    expect(int4Encode(Number.NaN, 1, 0)).toBe(0);
    expect(int4Encode(7.5, 1, 0)).toBe(8);
    expect(int4Encode(6.5, 1, 0)).toBe(6);
    expect(int4Encode(-3, 1, 3)).toBe(0);
    expect(int4Decode(0, 2, 3)).toBe(-6);
  });
  it('keeps a constant group exact through the scale floor', () => {
    const scale = int4ScaleFromRange(5, 5);
    const zero = int4ZeroPoint(5, inverseScale(scale));
    expect(Number.isInteger(zero)).toBe(true);
    expect(int4Decode(int4Encode(5, inverseScale(scale), zero), scale, zero)).toBeCloseTo(5, 5);
    expect(int4ScaleFromRange(0, 0)).toBe(0);
  });
  it('reconstructs every value of its group within a step, and most within half a step', () => {
    fc.assert(
      fc.property(
        fc.array(fc.float({ min: -100, max: 100, noNaN: true }), { minLength: 2, maxLength: 64 }),
        (vals) => {
          let lo = Number.POSITIVE_INFINITY;
          let hi = Number.NEGATIVE_INFINITY;
          for (const v of vals) {
            lo = Math.min(lo, v);
            hi = Math.max(hi, v);
          }
          const scale = int4ScaleFromRange(lo, hi);
          const inv = inverseScale(scale);
          const zero = int4ZeroPoint(lo, inv);
          return vals.every((v) => {
            const err = Math.abs(int4Decode(int4Encode(v, inv, zero), scale, zero) - v);
            // Rounding lo to the integer grid can push one end by up to half a step more.
            return err <= scale * 1.0001 + 1e-30;
          });
        },
      ),
    );
  });
});
