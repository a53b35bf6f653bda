// MXFP4 (OCP microscaling FP4, the format of gpt-oss's expert weights): 32 weights per block,
// one E8M0 scale byte (a bare power-of-two exponent, bias 127) and 32 E2M1 codes (sign, 2-bit
// exponent, 1-bit mantissa) packed as Q4_0 does: byte j holds weight j (low nibble) and j + 16
// (high nibble). Layout e qs[16] = 17 bytes. ggml stores E2M1 values doubled (`kvalues_mxfp4`,
// integers) and halves the scale instead (`ggml_e8m0_to_fp32_half`), so every decoded value is
// one exact product of an integer and a power of two.

import { checkBlockCall } from './block-io.js';

const QK = 32;
const BYTES = 17;
const fr = Math.fround;

/** ggml's `kvalues_mxfp4`: the E2M1 values ×2 that a code selects (codes 8–15 are negative). */
export const MXFP4_VALUES: readonly number[] = Object.freeze([
  0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
]);
const V = Int8Array.from(MXFP4_VALUES);

const bits = new Uint32Array(1);
const asF32 = new Float32Array(bits.buffer);

/** ggml's `ggml_e8m0_to_fp32_half`: 2^(e − 128), subnormal for e < 2 (e = 255 is 2^127, no NaN). */
export function e8m0Half(e: number): number {
  bits[0] = e < 2 ? 0x00200000 << e : (e - 1) << 23;
  return asF32[0]!;
}

/** MXFP4: `x = kvalues[q] · 2^(e − 128)`. */
export function dequantizeMxfp4(
  src: Uint8Array,
  srcOffset: number,
  dst: Float32Array,
  dstOffset: number,
  n: number,
): void {
  checkBlockCall('MXFP4', QK, BYTES, src, srcOffset, dst, dstOffset, n);
  for (let b = 0, o = srcOffset, y = dstOffset; b < n / QK; b++, o += BYTES, y += QK) {
    const d = e8m0Half(src[o]!);
    for (let j = 0; j < 16; j++) {
      const q = src[o + 1 + j]!;
      dst[y + j] = V[q & 15]! * d;
      dst[y + j + 16] = V[q >>> 4]! * d;
    }
  }
}

/** ggml's `best_index_mxfp4`: the first code whose value times `d` is nearest `x` (f32 errors). */
function bestIndex(x: number, d: number): number {
  let best = 0;
  let bestErr = Math.abs(fr(V[0]! * d - x));
  for (let i = 1; i < 16; i++) {
    const err = Math.abs(fr(fr(V[i]! * d) - x));
    if (err < bestErr) {
      best = i;
      bestErr = err;
    }
  }
  return best;
}

/**
 * `quantize_row_mxfp4_ref`: the scale exponent is `floor(log2f(amax)) − 2 + 127` (so the
 * largest weight lands on the codes' 4–8 range), each weight its nearest code. An all-zero
 * block gets e = 0. `log2f` is taken as the f32 rounding of the exact log2, as glibc's
 * correctly rounded `log2f` returns it (just under a power of two it rounds up to the integer).
 */
export function quantizeMxfp4(
  src: Float32Array,
  srcOffset: number,
  dst: Uint8Array,
  dstOffset: number,
  n: number,
): void {
  checkBlockCall('MXFP4', QK, BYTES, dst, dstOffset, src, srcOffset, n);
  for (let b = 0, x = srcOffset, o = dstOffset; b < n / QK; b++, x += QK, o += BYTES) {
    let amax = 0;
    for (let j = 0; j < QK; j++) {
      const a = Math.abs(src[x + j]!);
      if (amax < a) amax = a;
    }
    // C's (uint8_t) of the float: ggml's inputs keep it in 0..255; wrap as x86 does otherwise.
    const e = amax > 0 ? (Math.floor(fr(Math.log2(amax))) - 2 + 127) & 0xff : 0;
    const d = e8m0Half(e);
    dst[o] = e;
    for (let j = 0; j < 16; j++) {
      dst[o + 1 + j] = bestIndex(src[x + j]!, d) | (bestIndex(src[x + 16 + j]!, d) << 4);
    }
  }
}
