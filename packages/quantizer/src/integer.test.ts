import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  int4Decode,
  int4Encode,
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
  it('clamps into 0..15 and sends NaN to code 0', () => {
    expect(int4Encode(-5, 1, 0)).toBe(0);
    expect(int4Encode(100, 1, 0)).toBe(15);
    expect(int4Encode(Number.NaN, 1, 0)).toBe(0);
    expect(int4Encode(7.5, 1, 0)).toBe(8);
    expect(int4Encode(6.5, 1, 0)).toBe(6);
  });
  it('decodes as one fused multiply-add (single rounding)', () => {
    // 3·(1 + 2^-23) is an exact f32 midpoint; a tiny negative zero point must pull it down.
    // Rounding the f64 sum first would land on the tie and go to even (up).
    const scale = 1 + 2 ** -23;
    expect(int4Decode(3, scale, -(2 ** -60))).toBe(3 + 2 ** -22);
    expect(int4Decode(3, scale, 2 ** -60)).toBe(3 + 2 ** -21);
    expect(int4Decode(3, scale, 0)).toBe(3 + 2 ** -21);
    expect(int4Decode(0, scale, -1.25)).toBe(-1.25);
  });
  it('fma matches an exact rational reference', () => {
    // Exact value with BigInt: q·scale + zero scaled by 2^200, then rounded to f32 by search.
    const exactRound = (q: number, scale: number, zero: number): number => {
      const big = (x: number): bigint => {
        // x = m·2^e exactly with |m| < 2^53.
        if (x === 0) return 0n;
        let e = 0;
        let m = x;
        while (!Number.isInteger(m)) {
          m *= 2;
          e--;
        }
        return BigInt(m) * 2n ** BigInt(200 + e);
      };
      const exact = BigInt(q) * big(scale) + big(zero);
      const approx = Math.fround(q * scale + zero);
      // Candidates: approx and its f32 neighbours; pick the nearest, ties to even bits.
      const f = new Float32Array([approx]);
      const b = new Uint32Array(f.buffer);
      const cands: number[] = [];
      for (const d of [-1, 0, 1]) {
        const nb = new Uint32Array([b[0]! + d]);
        cands.push(new Float32Array(nb.buffer)[0]!);
      }
      let best = cands[1]!;
      let bestErr = -1n;
      for (const c of cands) {
        const err = big(c) - exact;
        const ae = err < 0n ? -err : err;
        const cb = new Uint32Array(new Float32Array([c]).buffer)[0]!;
        if (bestErr < 0n || ae < bestErr || (ae === bestErr && (cb & 1) === 0)) {
          best = c;
          bestErr = ae;
        }
      }
      return best;
    };
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 15 }),
        fc.float({ min: Math.fround(1e-6), max: Math.fround(1e3), noNaN: true }),
        fc.float({
          min: Math.fround(-1e3),
          max: Math.fround(1e3),
          noNaN: true,
          noDefaultInfinity: true,
        }),
        (q, scale, zero) =>
          Object.is(int4Decode(q, scale, zero), exactRound(q, scale, zero)) ||
          int4Decode(q, scale, zero) === exactRound(q, scale, zero),
      ),
      { numRuns: 2000 },
    );
  });
});
