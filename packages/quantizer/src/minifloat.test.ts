import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  bitsToF32,
  decodeFloat,
  decodeFloatBits,
  encodeFloat,
  encodeFloatBits,
  FLOAT_FORMATS,
  type FloatFormat,
  f32ToBits,
  fp8E4m3Decode,
  fp8E4m3Encode,
  fp8E5m2Encode,
} from './minifloat.js';
import { referenceDecode, referenceEncode } from './reference.test-util.js';

const FORMATS: FloatFormat[] = ['f16', 'bf16', 'fp8-e4m3', 'fp8-e5m2'];

function isNanCode(format: FloatFormat, code: number): boolean {
  return Number.isNaN(referenceDecode(format, code));
}

/** What the codec must return for `x`, derived from the search reference and the overflow rules. */
function expectedCode(format: FloatFormat, bits: number, saturate: boolean): number {
  const s = FLOAT_FORMATS[format];
  const x = bitsToF32(bits);
  const r = referenceEncode(format, x);
  const sign = bits >>> 31 ? 1 << (s.bits - 1) : 0;
  if (r === 'nan') return -1;
  if (r === 'overflow') {
    if (!Number.isFinite(x)) return sign | (s.infCode ?? (saturate ? s.maxCode : s.nanCode));
    return sign | (saturate ? s.maxCode : (s.infCode ?? s.nanCode));
  }
  return r;
}

describe('format constants', () => {
  it('matches the OCP OFP8 and IEEE tables', () => {
    expect(FLOAT_FORMATS['fp8-e4m3'].max).toBe(448);
    expect(FLOAT_FORMATS['fp8-e4m3'].minNormal).toBe(2 ** -6);
    expect(FLOAT_FORMATS['fp8-e4m3'].minSubnormal).toBe(2 ** -9);
    expect(FLOAT_FORMATS['fp8-e4m3'].infCode).toBeUndefined();
    expect(FLOAT_FORMATS['fp8-e5m2'].max).toBe(57344);
    expect(FLOAT_FORMATS['fp8-e5m2'].infCode).toBe(0x7c);
    expect(FLOAT_FORMATS.f16.max).toBe(65504);
    expect(FLOAT_FORMATS.bf16.max).toBe(bitsToF32(0x7f7f0000));
    for (const f of FORMATS) {
      expect(decodeFloat(f, FLOAT_FORMATS[f].maxCode)).toBe(FLOAT_FORMATS[f].max);
      expect(decodeFloat(f, 1)).toBe(FLOAT_FORMATS[f].minSubnormal);
    }
  });
});

describe('exhaustive decode and round trip', () => {
  for (const format of FORMATS) {
    const bits = FLOAT_FORMATS[format].bits;
    it(`${format}: every one of the ${2 ** bits} codes decodes to the formula value and re-encodes to itself`, () => {
      const spec = FLOAT_FORMATS[format];
      let nans = 0;
      const bad: string[] = [];
      for (let c = 0; c < 2 ** bits; c++) {
        const want = referenceDecode(format, c);
        const got = decodeFloat(format, c);
        if (Number.isNaN(want)) {
          nans++;
          // NaN stays NaN through encode (sign kept; E4M3 has one NaN per sign).
          const back = encodeFloatBits(spec, decodeFloatBits(spec, c));
          if (
            !Number.isNaN(got) ||
            !isNanCode(format, back) ||
            back >> (bits - 1) !== c >> (bits - 1)
          ) {
            bad.push(`NaN code ${c}: decoded ${got}, re-encoded ${back}`);
          }
          continue;
        }
        if (!Object.is(got, want)) bad.push(`code ${c}: decoded ${got}, want ${want}`);
        const back = encodeFloatBits(spec, decodeFloatBits(spec, c));
        const backNonSat = encodeFloatBits(spec, decodeFloatBits(spec, c), false);
        if (back !== c || backNonSat !== c)
          bad.push(`code ${c}: re-encoded ${back} / ${backNonSat}`);
      }
      expect(bad.slice(0, 10)).toEqual([]);
      const expectedNans = { f16: 2046, bf16: 254, 'fp8-e4m3': 2, 'fp8-e5m2': 6 }[format];
      expect(nans).toBe(expectedNans);
    });
  }
});

describe('f32 → small float matches the search reference (round to nearest even)', () => {
  for (const format of FORMATS) {
    const spec = FLOAT_FORMATS[format];
    const ok = (bits: number, saturate: boolean): boolean => {
      const want = expectedCode(format, bits, saturate);
      const got = encodeFloatBits(spec, bits >>> 0, saturate);
      return want === -1 ? isNanCode(format, got) : got === want;
    };
    const check = (bits: number, saturate: boolean): void => {
      expect(ok(bits, saturate), `bits 0x${(bits >>> 0).toString(16)} saturate ${saturate}`).toBe(
        true,
      );
    };
    it(`${format}: arbitrary f32 bit patterns`, () => {
      fc.assert(
        fc.property(fc.integer({ min: 0, max: 0xffffffff }), fc.boolean(), (b, sat) =>
          check(b, sat),
        ),
        { numRuns: 3000 },
      );
    });
    it(`${format}: f32 values near the format's range, subnormals included`, () => {
      const lowExp = 127 - spec.bias - spec.mantBits - 3;
      const highExp = 127 + (spec.maxCode >> spec.mantBits) - spec.bias + 2;
      fc.assert(
        fc.property(
          fc.integer({ min: Math.max(0, lowExp), max: Math.min(254, highExp) }),
          fc.integer({ min: 0, max: 0x7fffff }),
          fc.boolean(),
          fc.boolean(),
          (e, m, neg, sat) => check(((neg ? 0x80000000 : 0) | (e << 23) | m) >>> 0, sat),
        ),
        { numRuns: 5000 },
      );
    });
    it(`${format}: exact midpoints between neighbours and one f32 ulp either side`, () => {
      const bad: number[] = [];
      for (let c = 0; c < spec.maxCode; c++) {
        const lo = decodeFloat(format, c);
        const hi = decodeFloat(format, c + 1);
        const mid = (lo + hi) / 2;
        if (Math.fround(mid) !== mid) continue; // bf16 neighbours at the f32 grid
        const mb = f32ToBits(mid);
        for (const b of [mb - 1, mb, mb + 1]) {
          if (!ok(b >>> 0, true)) bad.push(b >>> 0);
          if (!ok((b | 0x80000000) >>> 0, false)) bad.push((b | 0x80000000) >>> 0);
        }
      }
      expect(bad.slice(0, 10)).toEqual([]);
    });
  }
});

describe('rounding happens once, from f32', () => {
  it('does not round through f16 (1.0625 + 2^-20 goes up to 1.125, not down to 1)', () => {
    const x = 1.0625 + 2 ** -20;
    expect(Math.fround(x)).toBe(x);
    expect(fp8E4m3Decode(fp8E4m3Encode(x))).toBe(1.125);
    // Through f16 the value would first land on the tie 1.0625 and then go to even (1.0).
    const viaF16 = decodeFloat('f16', encodeFloat('f16', x));
    expect(viaF16).toBe(1.0625);
    expect(fp8E4m3Decode(fp8E4m3Encode(viaF16))).toBe(1);
  });
  it('rounds f32 subnormals into bf16 subnormals', () => {
    expect(encodeFloatBits(FLOAT_FORMATS.bf16, 0x00008000)).toBe(0x0000); // tie, even
    expect(encodeFloatBits(FLOAT_FORMATS.bf16, 0x00018000)).toBe(0x0002); // tie, even up
    expect(encodeFloatBits(FLOAT_FORMATS.bf16, 0x00008001)).toBe(0x0001);
    expect(decodeFloatBits(FLOAT_FORMATS.bf16, 0x8001)).toBe(0x80010000);
  });
});

describe('overflow, infinity and NaN', () => {
  it('E4M3 saturates by default and gives NaN when not saturating', () => {
    expect(fp8E4m3Encode(1000)).toBe(0x7e);
    expect(fp8E4m3Encode(-1000)).toBe(0xfe);
    expect(fp8E4m3Encode(1000, { saturate: false })).toBe(0x7f);
    expect(fp8E4m3Encode(464)).toBe(0x7e); // tie between 448 and 480: even mantissa wins
    expect(fp8E4m3Encode(464, { saturate: false })).toBe(0x7e);
    expect(fp8E4m3Encode(465, { saturate: false })).toBe(0x7f);
    expect(fp8E4m3Encode(Number.POSITIVE_INFINITY)).toBe(0x7e);
    expect(fp8E4m3Encode(Number.NEGATIVE_INFINITY, { saturate: false })).toBe(0xff);
    expect(fp8E4m3Encode(Number.NaN)).toBe(0x7f);
    expect(encodeFloatBits(FLOAT_FORMATS['fp8-e4m3'], 0xffc00000)).toBe(0xff);
  });
  it('E5M2 keeps infinities and saturates finite overflow', () => {
    expect(fp8E5m2Encode(1e6)).toBe(0x7b);
    expect(fp8E5m2Encode(1e6, { saturate: false })).toBe(0x7c);
    expect(fp8E5m2Encode(61440, { saturate: false })).toBe(0x7c); // tie, even is the inf code
    expect(fp8E5m2Encode(61439, { saturate: false })).toBe(0x7b);
    expect(fp8E5m2Encode(Number.NEGATIVE_INFINITY)).toBe(0xfc);
    expect(isNanCode('fp8-e5m2', fp8E5m2Encode(Number.NaN))).toBe(true);
    expect(decodeFloat('fp8-e5m2', 0x7c)).toBe(Number.POSITIVE_INFINITY);
  });
  it('f16 saturates at 65504 and keeps quiet NaN payloads', () => {
    expect(encodeFloat('f16', 70000)).toBe(0x7bff);
    expect(encodeFloat('f16', 70000, { saturate: false })).toBe(0x7c00);
    const spec = FLOAT_FORMATS.f16;
    expect(encodeFloatBits(spec, decodeFloatBits(spec, 0x7e55))).toBe(0x7e55);
    // A signalling NaN comes back quiet.
    expect(encodeFloatBits(spec, decodeFloatBits(spec, 0x7c01))).toBe(0x7e01);
  });
  it('keeps the sign of zero', () => {
    for (const f of FORMATS) {
      const sign = 1 << (FLOAT_FORMATS[f].bits - 1);
      expect(encodeFloat(f, -0)).toBe(sign);
      expect(Object.is(decodeFloat(f, sign), -0)).toBe(true);
    }
  });
});

describe('properties', () => {
  it('encoding is monotonic in the value (non-decreasing decoded result)', () => {
    for (const format of FORMATS) {
      fc.assert(
        fc.property(
          fc.float({ noNaN: true, noDefaultInfinity: true }),
          fc.float({ noNaN: true, noDefaultInfinity: true }),
          (a, b) => {
            const [lo, hi] = a <= b ? [a, b] : [b, a];
            return (
              decodeFloat(format, encodeFloat(format, lo)) <=
              decodeFloat(format, encodeFloat(format, hi))
            );
          },
        ),
        { numRuns: 500 },
      );
    }
  });
  it('the error of a representable-range value is at most half a step', () => {
    for (const format of FORMATS) {
      const spec = FLOAT_FORMATS[format];
      fc.assert(
        fc.property(fc.float({ min: -spec.max, max: spec.max, noNaN: true }), (x) => {
          const y = decodeFloat(format, encodeFloat(format, x));
          const ulp = Math.max(
            spec.minSubnormal,
            2 ** (Math.floor(Math.log2(Math.abs(y) || 1)) - spec.mantBits),
          );
          return Math.abs(x - y) <= ulp;
        }),
        { numRuns: 500 },
      );
    }
  });
});
