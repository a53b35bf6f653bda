// Scalar integer codecs. Every product and sum is rounded to f32 exactly as the WGSL twins do
// (WGSL multiplies and adds with correct rounding, and `round` is half-to-even), so a value
// quantized on the CPU and on the GPU gives the same code.

import { f32ToBits } from './minifloat.js';

const fround = Math.fround;

/** Largest int8 magnitude used: symmetric, so -128 is never produced. */
export const INT8_MAX = 127;
/** Largest int4 code (asymmetric, codes 0..15). */
export const INT4_MAX = 15;

/** Rounds half to even, as WGSL's `round`. */
export function roundHalfEven(v: number): number {
  const r = Math.round(v);
  return r - v === 0.5 && (r & 1) !== 0 ? r - 1 : r;
}

/** True when `x` is neither NaN nor infinite (tested on f32 bits, like the WGSL). */
export function isFiniteF32(x: number): boolean {
  return (f32ToBits(x) & 0x7f800000) !== 0x7f800000;
}

/**
 * The reciprocal used to quantize with `scale`, 0 for a zero scale (an all-zero group).
 * Quantizers multiply by it instead of dividing, on both CPU and GPU.
 */
export function inverseScale(scale: number): number {
  return scale === 0 ? 0 : fround(1 / scale);
}

/**
 * Encodes `x` as a symmetric int8 code: round-half-even of `x · invScale`, clamped to ±127.
 * Returns the signed value (-127..127). NaN gives 0; infinities saturate.
 */
export function int8Encode(x: number, invScale: number): number {
  const bits = f32ToBits(x);
  if ((bits & 0x7fffffff) > 0x7f800000) return 0;
  const v = fround(fround(x) * invScale);
  if (Number.isNaN(v)) return 0; // inf · 0 (all-zero group)
  const q = roundHalfEven(v);
  return q > INT8_MAX ? INT8_MAX : Math.max(q, -INT8_MAX);
}

/** Decodes a signed int8 value `q` with `scale`: the f32 product `q · scale`. */
export function int8Decode(q: number, scale: number): number {
  return fround(q * scale);
}

/**
 * Encodes `x` as an asymmetric int4 code 0..15: round-half-even of `(x − min) · invScale`,
 * clamped. `min` is the group's zero point (the value of code 0). NaN gives code 0.
 */
export function int4Encode(x: number, invScale: number, min: number): number {
  const bits = f32ToBits(x);
  if ((bits & 0x7fffffff) > 0x7f800000) return 0;
  const v = fround(fround(fround(x) - min) * invScale);
  if (Number.isNaN(v)) return 0;
  const q = roundHalfEven(v);
  return q > INT4_MAX ? INT4_MAX : Math.max(q, 0);
}

const f64 = new Float64Array(1);
const w64 = new Uint32Array(f64.buffer);

/**
 * `q · scale + min` with a single rounding to f32 (a fused multiply-add), as WGSL's `fma`.
 * `q · scale` is exact in f64 (4-bit × 24-bit); the sum is made round-to-odd in f64 so that the
 * final rounding to f32 is correct even when the f64 sum was inexact.
 */
export function int4Decode(q: number, scale: number, min: number): number {
  const p = q * scale;
  const s = p + min;
  const bv = s - p;
  const err = p - (s - bv) + (min - bv);
  if (err === 0 || Number.isNaN(s)) return fround(s);
  f64[0] = s;
  // Little-endian: w64[0] is the low word of the f64 mantissa.
  if ((w64[0]! & 1) === 0) {
    // Step one f64 ulp towards the exact value: round-to-odd keeps the f32 rounding exact.
    const towardLarger = err > 0 === s > 0;
    if (towardLarger) {
      w64[0] = (w64[0]! + 1) >>> 0;
      if (w64[0] === 0) w64[1] = (w64[1]! + 1) >>> 0;
    } else {
      if (w64[0] === 0) w64[1] = (w64[1]! - 1) >>> 0;
      w64[0] = (w64[0]! - 1) >>> 0;
    }
  }
  return fround(f64[0]!);
}

/** The int8 scale that maps `amax` to 127: `amax · f32(1/127)`. */
export function int8ScaleFromAmax(amax: number): number {
  return fround(amax * fround(1 / INT8_MAX));
}

/** The int4 scale of a group spanning [min, max]: `(max − min) · f32(1/15)`. */
export function int4ScaleFromRange(min: number, max: number): number {
  return fround(fround(max - min) * fround(1 / INT4_MAX));
}
