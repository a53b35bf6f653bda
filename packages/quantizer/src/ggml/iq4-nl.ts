// IQ4_NL: 32 weights per block, one f16 scale and 4-bit indices into a fixed non-uniform table
// (`kvalues_iq4nl`, denser near zero, as weights are). Layout d[2] qs[16] = 18 bytes, byte j
// holding weight j (low nibble) and j + 16 (high nibble), as Q4_0.

import { f32ToF16Bits } from '../ieee-half.js';
import { checkBlockCall, f16At, putF16 } from './block-io.js';

const QK = 32;
const fr = Math.fround;
const GROUP_MAX_EPS = fr(1e-15);

/** ggml's `kvalues_iq4nl`: the 16 values an IQ4_NL (and IQ4_XS) index selects, times `d`. */
export const IQ4_NL_VALUES: readonly number[] = Object.freeze([
  -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
]);
const V = Int8Array.from(IQ4_NL_VALUES);

/** IQ4_NL: `x = d · kvalues[q]`. */
export function dequantizeIq4Nl(
  src: Uint8Array,
  srcOffset: number,
  dst: Float32Array,
  dstOffset: number,
  n: number,
): void {
  checkBlockCall('IQ4_NL', QK, 18, src, srcOffset, dst, dstOffset, n);
  for (let b = 0, o = srcOffset, y = dstOffset; b < n / QK; b++, o += 18, y += QK) {
    const d = f16At(src, o);
    for (let j = 0; j < 16; j++) {
      const q = src[o + 2 + j]!;
      dst[y + j] = d * V[q & 15]!;
      dst[y + j + 16] = d * V[q >>> 4]!;
    }
  }
}

/** ggml's `best_index_int8`: the table index nearest `x` (the upper one on exact ties). */
function bestIndex(x: number): number {
  if (x <= V[0]!) return 0;
  if (x >= V[15]!) return 15;
  let ml = 0;
  let mu = 15;
  while (mu - ml > 1) {
    const mav = (ml + mu) >>> 1;
    if (x < V[mav]!) mu = mav;
    else ml = mav;
  }
  return fr(x - V[mu - 1]!) < fr(V[mu]! - x) ? mu - 1 : mu;
}
const L = new Uint8Array(QK);

/**
 * `quantize_row_iq4_nl_ref` (`quantize_row_iq4_nl_impl` with one 32-weight block, weights x²,
 * no search over scales): the scale is the weighted least-squares fit of the first rounding.
 * A block under ggml's GROUP_MAX_EPS gets d = 0 and, as in ggml, the codes of the block before
 * it in the same call (ggml never clears them; they decode to zeros either way); the first block
 * of a call gets codes 0 there, where ggml's are uninitialized.
 */
export function quantizeIq4Nl(
  src: Float32Array,
  srcOffset: number,
  dst: Uint8Array,
  dstOffset: number,
  n: number,
): void {
  checkBlockCall('IQ4_NL', QK, 18, dst, dstOffset, src, srcOffset, n);
  L.fill(0);
  for (let b = 0, x = srcOffset, o = dstOffset; b < n / QK; b++, x += QK, o += 18) {
    let amax = 0;
    let max = 0;
    for (let j = 0; j < QK; j++) {
      const ax = Math.abs(src[x + j]!);
      if (ax > amax) {
        amax = ax;
        max = src[x + j]!;
      }
    }
    let d = 0;
    if (amax >= GROUP_MAX_EPS) {
      const id = fr(1 / fr(max / V[0]!));
      let sumqx = 0;
      let sumq2 = 0;
      for (let j = 0; j < QK; j++) {
        const v = src[x + j]!;
        const l = bestIndex(fr(id * v));
        L[j] = l;
        const q = V[l]!;
        const w = fr(v * v);
        sumqx = fr(sumqx + fr(fr(w * q) * v));
        sumq2 = fr(sumq2 + fr(fr(w * q) * q));
      }
      d = sumq2 > 0 ? fr(sumqx / sumq2) : 0;
    }
    putF16(dst, o, f32ToF16Bits(d));
    for (let j = 0; j < 16; j++) dst[o + 2 + j] = L[j]! | (L[j + 16]! << 4);
  }
}
