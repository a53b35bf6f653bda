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
 * Encodes `x` as an asymmetric int4 code 0..15: `round(x · invScale) + zero`, clamped, where
 * `zero` is the group's integer zero point (see {@link int4ZeroPoint}). Rounding before adding
 * the integer keeps every step exact, so no fused multiply-add can change the result on a GPU.
 * NaN gives code 0.
 */
export function int4Encode(x: number, invScale: number, zero: number): number {
  const bits = f32ToBits(x);
  if ((bits & 0x7fffffff) > 0x7f800000) return 0;
  const v = fround(fround(x) * invScale);
  if (Number.isNaN(v)) return 0;
  const q = fround(roundHalfEven(v) + zero);
  return q > INT4_MAX ? INT4_MAX : Math.max(q, 0);
}

/**
 * Decodes an int4 code: `(q − zero) · scale`. The difference of two small integers is exact,
 * so this is one rounding on every GPU, with or without fused multiply-add.
 */
export function int4Decode(q: number, scale: number, zero: number): number {
  return fround((q - zero) * scale);
}

/** The integer zero point of a group whose minimum is `lo`: `−round(lo · invScale)`. */
export function int4ZeroPoint(lo: number, invScale: number): number {
  return -roundHalfEven(fround(lo * invScale));
}

/** The int8 scale that maps `amax` to 127: `amax · f32(1/127)`. */
export function int8ScaleFromAmax(amax: number): number {
  return fround(amax * fround(1 / INT8_MAX));
}

/** Scales below the smallest normal f32 have no usable reciprocal: such groups are all ~0. */
export const MIN_SCALE = 2 ** -126;

/**
 * The int4 scale of a group spanning [lo, hi]: `(hi − lo) · f32(1/15)`, but at least
 * `max(|lo|, |hi|) · 2^-20` so the zero point stays an exact f32 integer for a (nearly)
 * constant group, and 0 when below {@link MIN_SCALE} (an all-zero group).
 */
export function int4ScaleFromRange(lo: number, hi: number): number {
  const span = fround(fround(hi - lo) * fround(1 / INT4_MAX));
  const floor = fround(Math.max(Math.abs(lo), Math.abs(hi)) * 2 ** -20);
  const s = Math.max(span, floor);
  return s < MIN_SCALE ? 0 : s;
}

/** An int4 group's scale, the scale's inverse, and its zero point. */
export interface Int4GroupParams {
  readonly scale: number;
  readonly inv: number;
  readonly zero: number;
}

/**
 * The int4 parameters of the group `x[start], x[start + stride], …` (indices below `end`), from
 * the range of its finite values: NaN and infinities do not set the range, and a group with no
 * finite value quantizes as [0, 0].
 */
export function int4GroupParams(
  x: ArrayLike<number>,
  start: number,
  end: number,
  stride = 1,
): Int4GroupParams {
  let lo = Number.POSITIVE_INFINITY;
  let hi = Number.NEGATIVE_INFINITY;
  for (let i = start; i < end; i += stride) {
    const v = x[i]!;
    if (!Number.isFinite(v)) continue;
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  if (lo > hi) {
    lo = 0;
    hi = 0;
  }
  const scale = int4ScaleFromRange(lo, hi);
  const inv = inverseScale(scale);
  return { scale, inv, zero: int4ZeroPoint(lo, inv) };
}
