import { f16BitsToF32, f32ToF16Bits } from '@kvasir/quantizer';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { packWeight, unpackWeight } from './weight-format.js';

describe('f16 conversion', () => {
  it('round-trips every finite half exactly', () => {
    for (let bits = 0; bits < 0x10000; bits++) {
      const exp = (bits >>> 10) & 0x1f;
      if (exp === 0x1f) continue;
      const v = f16BitsToF32(bits);
      const back = f32ToF16Bits(v);
      // +0 and -0 keep their sign bit.
      expect(back).toBe(bits);
    }
  });

  it('rounds to the nearest half (ties to even)', () => {
    fc.assert(
      fc.property(fc.float({ min: -60000, max: 60000, noNaN: true }), (x) => {
        const h = f16BitsToF32(f32ToF16Bits(x));
        // No other half is strictly closer: check the neighbours.
        const bits = f32ToF16Bits(x);
        for (const nb of [bits - 1, bits + 1]) {
          if (nb < 0 || nb > 0xffff || ((nb >>> 10) & 0x1f) === 0x1f) continue;
          if ((nb ^ bits) & 0x8000) continue;
          expect(Math.abs(f16BitsToF32(nb) - x)).toBeGreaterThanOrEqual(Math.abs(h - x));
        }
      }),
    );
  });
});

describe('packed weights', () => {
  it('f32 and f16 decode to the (rounded) source', () => {
    const src = new Float32Array([1, -2.5, 3.25, 0.1, 1e-3, -7, 65504, 0]);
    expect(Array.from(unpackWeight(packWeight(src, 2, 4, 'f32')))).toEqual(Array.from(src));
    const h = unpackWeight(packWeight(src, 2, 4, 'f16'));
    for (let i = 0; i < src.length; i++)
      expect(h[i]).toBe(f16BitsToF32(f32ToF16Bits(src[i] as number)));
  });

  it('int8 keeps every element within half a step of its group scale', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 4 }),
        fc.constantFrom(4, 8, 16),
        fc.integer({ min: 1, max: 4 }),
        fc.integer(),
        (rows, group, groups, seed) => {
          const cols = group * groups;
          const src = new Float32Array(rows * cols);
          let s = seed >>> 0;
          for (let i = 0; i < src.length; i++) {
            s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
            src[i] = (s / 2 ** 32 - 0.5) * 8;
          }
          const w = packWeight(src, rows, cols, 'int8', group);
          const back = unpackWeight(w);
          for (let i = 0; i < src.length; i++) {
            const scale = w.scales?.[Math.floor(i / group)] as number;
            expect(Math.abs((back[i] as number) - (src[i] as number))).toBeLessThanOrEqual(
              scale / 2 + 1e-6,
            );
          }
        },
      ),
      { numRuns: 50 },
    );
  });
});
