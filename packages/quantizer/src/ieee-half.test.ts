import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  bf16BitsToF32,
  f16BitsToF32,
  f32ToBf16Bits,
  f32ToF16Bits,
  roundToF16,
} from './ieee-half.js';
import { decodeFloat, encodeFloat } from './minifloat.js';

// The fast paths against the generic minifloat codec, which is the bit-exact reference.
describe('fast IEEE half and bfloat16 conversions', () => {
  it('decode every f16 and bf16 code exactly as the generic codec', () => {
    const same = (a: number, b: number) => (Number.isNaN(a) ? Number.isNaN(b) : Object.is(a, b));
    for (let code = 0; code < 0x10000; code++) {
      expect(same(f16BitsToF32(code), decodeFloat('f16', code))).toBe(true);
      expect(same(bf16BitsToF32(code), decodeFloat('bf16', code))).toBe(true);
    }
  });

  it('encode any f32 as the generic codec does without saturation', () => {
    fc.assert(
      fc.property(fc.float({ noNaN: true }), (x) => {
        expect(f32ToF16Bits(x)).toBe(encodeFloat('f16', x, { saturate: false }));
        expect(f32ToBf16Bits(x)).toBe(encodeFloat('bf16', x, { saturate: false }));
      }),
      { numRuns: 20_000 },
    );
  });

  it('round-trips every finite f16 value, and overflow goes to infinity', () => {
    for (let code = 0; code < 0x7c00; code++) {
      expect(f32ToF16Bits(f16BitsToF32(code))).toBe(code);
      expect(f32ToF16Bits(-f16BitsToF32(code))).toBe(code | 0x8000);
    }
    expect(f32ToF16Bits(65520)).toBe(0x7c00);
    expect(roundToF16(65519)).toBe(65504);
    expect(Number.isNaN(f16BitsToF32(f32ToF16Bits(Number.NaN)))).toBe(true);
  });
});
