// Bit-exact conversions between f32 and the small IEEE-like float formats (f16, bf16, OCP FP8).
// Everything works on the f32 bit pattern so rounding happens once, straight from f32, for
// normals and subnormals alike; the WGSL twins in `wgsl.ts` are the same algorithm line by line.

/** A floating-point storage format, by name. `fp8-*` are the OCP OFP8 variants (not FNUZ). */
export type FloatFormat = 'f16' | 'bf16' | 'fp8-e4m3' | 'fp8-e5m2';

/** Bit-level description of a small float format. */
export interface FloatFormatSpec {
  /** Format name. */
  readonly name: FloatFormat;
  /** Standard the encoding follows, so variants with the same field widths are never confused. */
  readonly standard: 'IEEE-754' | 'bfloat16' | 'OCP-OFP8';
  /** Total bits per code. */
  readonly bits: 8 | 16;
  /** Exponent field width. */
  readonly expBits: number;
  /** Mantissa (fraction) field width. */
  readonly mantBits: number;
  /** Exponent bias. */
  readonly bias: number;
  /**
   * True when the all-ones exponent encodes infinity (mantissa 0) and NaN (otherwise), as in
   * IEEE 754. False for OCP E4M3, where only S.1111.111 is NaN and there is no infinity.
   */
  readonly ieeeSpecials: boolean;
  /** Largest finite magnitude code (sign bit clear). */
  readonly maxCode: number;
  /** Largest finite value. */
  readonly max: number;
  /** Smallest positive normal value. */
  readonly minNormal: number;
  /** Smallest positive subnormal value. */
  readonly minSubnormal: number;
  /** Canonical (quiet) NaN code with the sign bit clear. */
  readonly nanCode: number;
  /** +infinity code, or undefined when the format has no infinity. */
  readonly infCode: number | undefined;
}

function spec(
  name: FloatFormat,
  standard: FloatFormatSpec['standard'],
  expBits: number,
  mantBits: number,
  bias: number,
  ieeeSpecials: boolean,
): FloatFormatSpec {
  const bits = (1 + expBits + mantBits) as 8 | 16;
  const expMax = (1 << expBits) - 1;
  // E4M3 keeps the top binade for finite values except its all-ones mantissa (NaN).
  const maxCode = ieeeSpecials
    ? (expMax << mantBits) - 1
    : (expMax << mantBits) | ((1 << mantBits) - 2);
  const maxExp = (maxCode >>> mantBits) - bias;
  const maxMant = maxCode & ((1 << mantBits) - 1);
  return {
    name,
    standard,
    bits,
    expBits,
    mantBits,
    bias,
    ieeeSpecials,
    maxCode,
    max: (1 + maxMant / (1 << mantBits)) * 2 ** maxExp,
    minNormal: 2 ** (1 - bias),
    minSubnormal: 2 ** (1 - bias - mantBits),
    nanCode: ieeeSpecials ? (expMax << mantBits) | (1 << (mantBits - 1)) : (1 << (bits - 1)) - 1,
    infCode: ieeeSpecials ? expMax << mantBits : undefined,
  };
}

/** The bit layouts of every float format this package supports. */
export const FLOAT_FORMATS: Readonly<Record<FloatFormat, FloatFormatSpec>> = {
  f16: spec('f16', 'IEEE-754', 5, 10, 15, true),
  bf16: spec('bf16', 'bfloat16', 8, 7, 127, true),
  'fp8-e4m3': spec('fp8-e4m3', 'OCP-OFP8', 4, 3, 7, false),
  'fp8-e5m2': spec('fp8-e5m2', 'OCP-OFP8', 5, 2, 15, true),
};

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** The IEEE 754 binary32 bit pattern of `x` (after rounding `x` to f32). */
export function f32ToBits(x: number): number {
  f32[0] = x;
  return u32[0]!;
}

/** The f32 value of a binary32 bit pattern. */
export function bitsToF32(bits: number): number {
  u32[0] = bits;
  return f32[0]!;
}

/**
 * Encodes one f32 bit pattern into `spec`'s code with round-to-nearest-even, straight from the
 * f32 bits (one rounding, subnormals included).
 *
 * Overflow: finite values that round past `spec.max` give ±max when `saturate` (the default),
 * else ±infinity (IEEE-like formats) or NaN (E4M3). Infinite inputs stay infinite where the
 * format has infinity; in E4M3 they give ±448 when saturating, else NaN. NaN inputs give a quiet
 * NaN with the input's sign (IEEE-like formats keep the top payload bits).
 */
export function encodeFloatBits(spec: FloatFormatSpec, bits: number, saturate = true): number {
  const m = spec.mantBits;
  const b = spec.bias;
  const signShift = 31 - (spec.bits - 1);
  const sign = (bits >>> signShift) & (1 << (spec.bits - 1));
  const a = bits & 0x7fffffff;
  if (a > 0x7f800000) {
    if (!spec.ieeeSpecials) return sign | spec.nanCode;
    return sign | spec.nanCode | ((a & 0x7fffff) >>> (23 - m));
  }
  if (a === 0x7f800000) {
    if (spec.infCode !== undefined) return sign | spec.infCode;
    return sign | (saturate ? spec.maxCode : spec.nanCode);
  }
  const e32 = a >>> 23;
  let r: number;
  if (e32 > 127 - b) {
    // Rebias the exponent in place; a carry out of the mantissa while rounding bumps the exponent.
    const v = a - ((127 - b) << 23);
    const shift = 23 - m;
    r = (v + ((1 << (shift - 1)) - 1) + ((v >>> shift) & 1)) >>> shift;
  } else {
    // The result is subnormal (or zero) in the target: count quanta of 2^(1-bias-mant).
    const mant = (a & 0x7fffff) | (e32 !== 0 ? 0x800000 : 0);
    const s = 151 - b - m - (e32 !== 0 ? e32 : 1);
    if (s > 24) {
      r = 0;
    } else {
      r = mant >>> s;
      const rem = mant & ((1 << s) - 1);
      const half = 1 << (s - 1);
      if (rem > half || (rem === half && (r & 1) === 1)) r += 1;
    }
  }
  if (r > spec.maxCode) {
    if (saturate) r = spec.maxCode;
    else r = spec.infCode ?? spec.nanCode;
  }
  return sign | r;
}

/**
 * Decodes one code of `spec` into an f32 bit pattern (exact: every code is an f32 value).
 * NaN codes give a quiet f32 NaN with the code's sign and payload bits.
 */
export function decodeFloatBits(spec: FloatFormatSpec, code: number): number {
  const m = spec.mantBits;
  const sign = ((code >>> (spec.bits - 1)) & 1) << 31;
  const mag = code & ((1 << (spec.bits - 1)) - 1);
  const e = mag >>> m;
  const f = mag & ((1 << m) - 1);
  const expMax = (1 << spec.expBits) - 1;
  if (spec.ieeeSpecials) {
    if (e === expMax) {
      return (sign | (f === 0 ? 0x7f800000 : 0x7fc00000 | (f << (23 - m)))) >>> 0;
    }
  } else if (mag === spec.nanCode) {
    return (sign | 0x7fc00000) >>> 0;
  }
  if (e === 0) {
    if (f === 0) return sign >>> 0;
    const p = 31 - Math.clz32(f);
    const biased = 128 - spec.bias - m + p;
    // Only bf16 subnormals are subnormal in f32 too; there the mantissa just moves up.
    if (biased < 1) return (sign | (f << (23 - m))) >>> 0;
    return (sign | (biased << 23) | ((f << (23 - p)) & 0x7fffff)) >>> 0;
  }
  return (sign | ((e - spec.bias + 127) << 23) | (f << (23 - m))) >>> 0;
}

/** Options of the scalar float encoders. */
export interface EncodeOptions {
  /** Clamp finite overflow to ±max (default true); false gives ±inf, or NaN for E4M3. */
  readonly saturate?: boolean;
}

/**
 * Encodes `x` (first rounded to f32, the codec's input type) into a code of `format`.
 * See {@link encodeFloatBits} for the overflow, infinity and NaN rules.
 */
export function encodeFloat(format: FloatFormat, x: number, options?: EncodeOptions): number {
  return encodeFloatBits(FLOAT_FORMATS[format], f32ToBits(x), options?.saturate ?? true);
}

/** Decodes one code of `format` to its (exact) value. */
export function decodeFloat(format: FloatFormat, code: number): number {
  return bitsToF32(decodeFloatBits(FLOAT_FORMATS[format], code));
}

/** f32 → OCP FP8 E4M3 code (saturating unless told otherwise). */
export function fp8E4m3Encode(x: number, options?: EncodeOptions): number {
  return encodeFloat('fp8-e4m3', x, options);
}
/** OCP FP8 E4M3 code → value. */
export function fp8E4m3Decode(code: number): number {
  return decodeFloat('fp8-e4m3', code);
}
/** f32 → OCP FP8 E5M2 code (saturating unless told otherwise). */
export function fp8E5m2Encode(x: number, options?: EncodeOptions): number {
  return encodeFloat('fp8-e5m2', x, options);
}
/** OCP FP8 E5M2 code → value. */
export function fp8E5m2Decode(code: number): number {
  return decodeFloat('fp8-e5m2', code);
}
/** f32 → IEEE binary16 code (saturating unless told otherwise). */
export function f16Encode(x: number, options?: EncodeOptions): number {
  return encodeFloat('f16', x, options);
}
/** IEEE binary16 code → value. */
export function f16Decode(code: number): number {
  return decodeFloat('f16', code);
}
/** f32 → bfloat16 code (saturating unless told otherwise). */
export function bf16Encode(x: number, options?: EncodeOptions): number {
  return encodeFloat('bf16', x, options);
}
/** bfloat16 code → value. */
export function bf16Decode(code: number): number {
  return decodeFloat('bf16', code);
}
