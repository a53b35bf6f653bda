// ggml's first block formats: 32 weights per block, one f16 scale `d` (and for the `_1`
// variants an f16 minimum `m`), 4- or 5-bit codes (the fifth bits gathered in a u32 `qh`) or
// 8-bit ones. Layouts and arithmetic as ggml-quants.c (`dequantize_row_q4_0`,
// `quantize_row_q4_0_ref`, ...). Every decoded value is one f32 rounding of an exact product
// (an 11-bit scale times a code of at most 8 bits) plus, for `_1`, the minimum, so a store to a
// Float32Array rounds exactly as ggml's f32 code does.
//
// Block layouts (bytes): Q4_0 d[2] qs[16] = 18; Q4_1 d[2] m[2] qs[16] = 20; Q5_0 d[2] qh[4]
// qs[16] = 22; Q5_1 d[2] m[2] qh[4] qs[16] = 24; Q8_0 d[2] qs[32] (int8) = 34. Byte j of qs
// holds weight j in its low nibble and weight j + 16 in its high nibble.

import { f32ToF16Bits } from '../ieee-half.js';
import { checkBlockCall, f16At, putF16, roundf } from './block-io.js';

const QK = 32;
const fr = Math.fround;

/** Q4_0: `x = d · (q − 8)`, q in 0..15. */
export function dequantizeQ4_0(
  src: Uint8Array,
  srcOffset: number,
  dst: Float32Array,
  dstOffset: number,
  n: number,
): void {
  checkBlockCall('Q4_0', QK, 18, src, srcOffset, dst, dstOffset, n);
  for (let b = 0, o = srcOffset, y = dstOffset; b < n / QK; b++, o += 18, y += QK) {
    const d = f16At(src, o);
    for (let j = 0; j < 16; j++) {
      const q = src[o + 2 + j]!;
      dst[y + j] = ((q & 15) - 8) * d;
      dst[y + j + 16] = ((q >>> 4) - 8) * d;
    }
  }
}

/** Q4_1: `x = d · q + m`, q in 0..15. */
export function dequantizeQ4_1(
  src: Uint8Array,
  srcOffset: number,
  dst: Float32Array,
  dstOffset: number,
  n: number,
): void {
  checkBlockCall('Q4_1', QK, 20, src, srcOffset, dst, dstOffset, n);
  for (let b = 0, o = srcOffset, y = dstOffset; b < n / QK; b++, o += 20, y += QK) {
    const d = f16At(src, o);
    const m = f16At(src, o + 2);
    for (let j = 0; j < 16; j++) {
      const q = src[o + 4 + j]!;
      dst[y + j] = (q & 15) * d + m;
      dst[y + j + 16] = (q >>> 4) * d + m;
    }
  }
}

const u32At = (src: Uint8Array, o: number): number =>
  (src[o]! | (src[o + 1]! << 8) | (src[o + 2]! << 16) | (src[o + 3]! << 24)) >>> 0;

/** Q5_0: `x = d · (q − 16)`, q in 0..31, bit 4 of weight j in bit j of `qh`. */
export function dequantizeQ5_0(
  src: Uint8Array,
  srcOffset: number,
  dst: Float32Array,
  dstOffset: number,
  n: number,
): void {
  checkBlockCall('Q5_0', QK, 22, src, srcOffset, dst, dstOffset, n);
  for (let b = 0, o = srcOffset, y = dstOffset; b < n / QK; b++, o += 22, y += QK) {
    const d = f16At(src, o);
    const qh = u32At(src, o + 2);
    for (let j = 0; j < 16; j++) {
      const q = src[o + 6 + j]!;
      const h0 = ((qh >>> j) << 4) & 0x10;
      const h1 = (qh >>> (j + 12)) & 0x10;
      dst[y + j] = (((q & 15) | h0) - 16) * d;
      dst[y + j + 16] = (((q >>> 4) | h1) - 16) * d;
    }
  }
}

/** Q5_1: `x = d · q + m`, q in 0..31. */
export function dequantizeQ5_1(
  src: Uint8Array,
  srcOffset: number,
  dst: Float32Array,
  dstOffset: number,
  n: number,
): void {
  checkBlockCall('Q5_1', QK, 24, src, srcOffset, dst, dstOffset, n);
  for (let b = 0, o = srcOffset, y = dstOffset; b < n / QK; b++, o += 24, y += QK) {
    const d = f16At(src, o);
    const m = f16At(src, o + 2);
    const qh = u32At(src, o + 4);
    for (let j = 0; j < 16; j++) {
      const q = src[o + 8 + j]!;
      const h0 = ((qh >>> j) << 4) & 0x10;
      const h1 = (qh >>> (j + 12)) & 0x10;
      dst[y + j] = ((q & 15) | h0) * d + m;
      dst[y + j + 16] = ((q >>> 4) | h1) * d + m;
    }
  }
}

/** Q8_0: `x = d · q`, q a signed byte. */
export function dequantizeQ8_0(
  src: Uint8Array,
  srcOffset: number,
  dst: Float32Array,
  dstOffset: number,
  n: number,
): void {
  checkBlockCall('Q8_0', QK, 34, src, srcOffset, dst, dstOffset, n);
  for (let b = 0, o = srcOffset, y = dstOffset; b < n / QK; b++, o += 34, y += QK) {
    const d = f16At(src, o);
    for (let j = 0; j < QK; j++) dst[y + j] = ((src[o + 2 + j]! << 24) >> 24) * d;
  }
}

// The quantizers mirror the f32 arithmetic of the `_ref` functions step by step (every
// intermediate through Math.fround): the codes depend on the unrounded f32 scale `d`, while the
// block stores it as f16. C's `(int8_t)` truncation is `| 0`; a NaN input gives code 0.

/** The value of largest magnitude in `src[o .. o + QK)` with its sign (the first on ties). */
function signedAbsMax(src: Float32Array, o: number): number {
  let amax = 0;
  let max = 0;
  for (let j = 0; j < QK; j++) {
    const v = src[o + j]!;
    if (amax < Math.abs(v)) {
      amax = Math.abs(v);
      max = v;
    }
  }
  return max;
}

/** `quantize_row_q4_0_ref`: `d = max / −8` from the signed absolute maximum. */
export function quantizeQ4_0(
  src: Float32Array,
  srcOffset: number,
  dst: Uint8Array,
  dstOffset: number,
  n: number,
): void {
  checkBlockCall('Q4_0', QK, 18, dst, dstOffset, src, srcOffset, n);
  for (let b = 0, x = srcOffset, o = dstOffset; b < n / QK; b++, x += QK, o += 18) {
    const d = fr(signedAbsMax(src, x) / -8);
    const id = d ? fr(1 / d) : 0;
    putF16(dst, o, f32ToF16Bits(d));
    for (let j = 0; j < 16; j++) {
      const x0 = fr(src[x + j]! * id);
      const x1 = fr(src[x + j + 16]! * id);
      const q0 = Math.min(15, fr(x0 + 8.5) | 0);
      const q1 = Math.min(15, fr(x1 + 8.5) | 0);
      dst[o + 2 + j] = q0 | (q1 << 4);
    }
  }
}

/** The minimum and maximum of `src[o .. o + QK)`, as the `_1` quantizers scan them. */
function minMax(src: Float32Array, o: number, out: Float64Array): void {
  let min = 3.4028234663852886e38;
  let max = -3.4028234663852886e38;
  for (let j = 0; j < QK; j++) {
    const v = src[o + j]!;
    if (v < min) min = v;
    if (v > max) max = v;
  }
  out[0] = min;
  out[1] = max;
}
const range = new Float64Array(2);

/** `quantize_row_q4_1_ref`: `d = (max − min) / 15`, `m = min`. */
export function quantizeQ4_1(
  src: Float32Array,
  srcOffset: number,
  dst: Uint8Array,
  dstOffset: number,
  n: number,
): void {
  checkBlockCall('Q4_1', QK, 20, dst, dstOffset, src, srcOffset, n);
  for (let b = 0, x = srcOffset, o = dstOffset; b < n / QK; b++, x += QK, o += 20) {
    minMax(src, x, range);
    const min = range[0]!;
    const d = fr(fr(range[1]! - min) / 15);
    const id = d ? fr(1 / d) : 0;
    putF16(dst, o, f32ToF16Bits(d));
    putF16(dst, o + 2, f32ToF16Bits(min));
    for (let j = 0; j < 16; j++) {
      const x0 = fr(fr(src[x + j]! - min) * id);
      const x1 = fr(fr(src[x + j + 16]! - min) * id);
      const q0 = Math.min(15, fr(x0 + 0.5) | 0);
      const q1 = Math.min(15, fr(x1 + 0.5) | 0);
      dst[o + 4 + j] = q0 | (q1 << 4);
    }
  }
}

/** Writes the 5-bit codes' high bits `qh` little-endian at `dst[o]`. */
function putU32(dst: Uint8Array, o: number, v: number): void {
  dst[o] = v & 0xff;
  dst[o + 1] = (v >>> 8) & 0xff;
  dst[o + 2] = (v >>> 16) & 0xff;
  dst[o + 3] = v >>> 24;
}

/** `quantize_row_q5_0_ref`: `d = max / −16`. */
export function quantizeQ5_0(
  src: Float32Array,
  srcOffset: number,
  dst: Uint8Array,
  dstOffset: number,
  n: number,
): void {
  checkBlockCall('Q5_0', QK, 22, dst, dstOffset, src, srcOffset, n);
  for (let b = 0, x = srcOffset, o = dstOffset; b < n / QK; b++, x += QK, o += 22) {
    const d = fr(signedAbsMax(src, x) / -16);
    const id = d ? fr(1 / d) : 0;
    putF16(dst, o, f32ToF16Bits(d));
    let qh = 0;
    for (let j = 0; j < 16; j++) {
      const q0 = Math.min(31, fr(fr(src[x + j]! * id) + 16.5) | 0);
      const q1 = Math.min(31, fr(fr(src[x + j + 16]! * id) + 16.5) | 0);
      dst[o + 6 + j] = (q0 & 15) | ((q1 & 15) << 4);
      qh |= ((q0 >>> 4) << j) | ((q1 >>> 4) << (j + 16));
    }
    putU32(dst, o + 2, qh);
  }
}

/**
 * `quantize_row_q5_1_ref`: `d = (max − min) / 31`, `m = min`. ggml casts `x + 0.5` to a byte
 * without clamping; gguf-py clamps to 31, which only differs if f32 rounding pushed a code past
 * 31.5, so both are the same here.
 */
export function quantizeQ5_1(
  src: Float32Array,
  srcOffset: number,
  dst: Uint8Array,
  dstOffset: number,
  n: number,
): void {
  checkBlockCall('Q5_1', QK, 24, dst, dstOffset, src, srcOffset, n);
  for (let b = 0, x = srcOffset, o = dstOffset; b < n / QK; b++, x += QK, o += 24) {
    minMax(src, x, range);
    const min = range[0]!;
    const d = fr(fr(range[1]! - min) / 31);
    const id = d ? fr(1 / d) : 0;
    putF16(dst, o, f32ToF16Bits(d));
    putF16(dst, o + 2, f32ToF16Bits(min));
    let qh = 0;
    for (let j = 0; j < 16; j++) {
      const q0 = Math.min(31, fr(fr(fr(src[x + j]! - min) * id) + 0.5) | 0);
      const q1 = Math.min(31, fr(fr(fr(src[x + j + 16]! - min) * id) + 0.5) | 0);
      dst[o + 8 + j] = (q0 & 15) | ((q1 & 15) << 4);
      qh |= ((q0 >>> 4) << j) | ((q1 >>> 4) << (j + 16));
    }
    putU32(dst, o + 4, qh);
  }
}

/** `quantize_row_q8_0_ref`: `d = amax / 127`, codes rounded half away from zero. */
export function quantizeQ8_0(
  src: Float32Array,
  srcOffset: number,
  dst: Uint8Array,
  dstOffset: number,
  n: number,
): void {
  checkBlockCall('Q8_0', QK, 34, dst, dstOffset, src, srcOffset, n);
  for (let b = 0, x = srcOffset, o = dstOffset; b < n / QK; b++, x += QK, o += 34) {
    let amax = 0;
    for (let j = 0; j < QK; j++) amax = Math.max(amax, Math.abs(src[x + j]!));
    const d = fr(amax / 127);
    const id = d ? fr(1 / d) : 0;
    putF16(dst, o, f32ToF16Bits(d));
    for (let j = 0; j < QK; j++) dst[o + 2 + j] = roundf(fr(src[x + j]! * id)) & 0xff;
  }
}
