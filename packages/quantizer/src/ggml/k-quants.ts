// ggml's k-quants: super-blocks of QK_K = 256 weights in sub-blocks of 16 or 32, whose 4- to
// 8-bit scales (and minimums) are themselves quantized against one or two f16 super-scales.
// Layouts and arithmetic as ggml-quants.c (`dequantize_row_q4_K`, `quantize_row_q4_K_ref`, ...).
//
// Dequantization is bit-exact with f32 C: the sub-block scale `d · sc` is an exact f32 (11 ×
// at most 8 significant bits), its product with the code is exact too (at most 25 bits, and
// Q6_K's 25 still fit a double exactly), so each value is one rounding of `dl · q − ml`, which a
// Float32Array store performs (a double result of one operation on f32 operands rounds to the
// same f32 as the f32 operation would: 53 ≥ 2 · 24 + 2).
//
// Block layouts (bytes, in struct order):
//   Q2_K  scales[16] (4-bit scale | 4-bit min << 4), qs[64] (2-bit), d[2], dmin[2]      =  84
//   Q3_K  hmask[32] (bit 2 of each code, inverted), qs[64] (2-bit), scales[12] (6-bit), d[2] = 110
//   Q4_K  d[2], dmin[2], scales[12] (6-bit scales and mins), qs[128] (4-bit)           = 144
//   Q5_K  d[2], dmin[2], scales[12], qh[32] (bit 4), qs[128] (low 4 bits)              = 176
//   Q6_K  ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] (int8), d[2]          = 210

import { f32ToF16Bits } from '../ieee-half.js';
import { checkBlockCall, f16At, nearestInt, putF16 } from './block-io.js';

const QK_K = 256;
const fr = Math.fround;

/** The 6-bit scale and min of sub-block `j` (0..7) of a Q4_K / Q5_K block (`get_scale_min_k4`). */
export function scaleMinK4(j: number, src: Uint8Array, s: number, out: Uint8Array): void {
  if (j < 4) {
    out[0] = src[s + j]! & 63;
    out[1] = src[s + j + 4]! & 63;
  } else {
    out[0] = (src[s + j + 4]! & 0xf) | ((src[s + j - 4]! >>> 6) << 4);
    out[1] = (src[s + j + 4]! >>> 4) | ((src[s + j]! >>> 6) << 4);
  }
}
const scMin = new Uint8Array(2);

/** The signed 6-bit scale of sub-block `j` (0..15) of a Q3_K block, minus 32. */
function scaleQ3K(j: number, src: Uint8Array, s: number): number {
  const lo = (src[s + (j & 7)]! >>> (4 * (j >>> 3))) & 0xf;
  const hi = (src[s + 8 + (j & 3)]! >>> (2 * (j >>> 2))) & 3;
  return (lo | (hi << 4)) - 32;
}

const i8 = (byte: number): number => (byte << 24) >> 24;

/** Q2_K: `x = d · sc · q − dmin · m` per 16 weights, q in 0..3. */
export function dequantizeQ2K(
  src: Uint8Array,
  srcOffset: number,
  dst: Float32Array,
  dstOffset: number,
  n: number,
): void {
  checkBlockCall('Q2_K', QK_K, 84, src, srcOffset, dst, dstOffset, n);
  for (let b = 0, o = srcOffset, y = dstOffset; b < n / QK_K; b++, o += 84, y += QK_K) {
    const d = f16At(src, o + 80);
    const dmin = f16At(src, o + 82);
    for (let half = 0; half < 2; half++) {
      const q = o + 16 + 32 * half;
      for (let j = 0; j < 4; j++) {
        const shift = 2 * j;
        for (let k = 0; k < 2; k++) {
          const sc = src[o + 8 * half + 2 * j + k]!;
          const dl = d * (sc & 0xf);
          const ml = dmin * (sc >>> 4);
          const out = y + 128 * half + 32 * j + 16 * k;
          for (let l = 0; l < 16; l++)
            dst[out + l] = dl * ((src[q + 16 * k + l]! >>> shift) & 3) - ml;
        }
      }
    }
  }
}

/** Q3_K: `x = d · (sc − 32) · (q − 4·!hbit)` per 16 weights, q in 0..3 plus the hmask bit. */
export function dequantizeQ3K(
  src: Uint8Array,
  srcOffset: number,
  dst: Float32Array,
  dstOffset: number,
  n: number,
): void {
  checkBlockCall('Q3_K', QK_K, 110, src, srcOffset, dst, dstOffset, n);
  for (let b = 0, o = srcOffset, y = dstOffset; b < n / QK_K; b++, o += 110, y += QK_K) {
    const d = f16At(src, o + 108);
    for (let half = 0; half < 2; half++) {
      const q = o + 32 + 32 * half;
      for (let j = 0; j < 4; j++) {
        const shift = 2 * j;
        const m = 1 << (4 * half + j);
        for (let k = 0; k < 2; k++) {
          const dl = d * scaleQ3K(8 * half + 2 * j + k, src, o + 96);
          const out = y + 128 * half + 32 * j + 16 * k;
          for (let l = 0; l < 16; l++) {
            const low = (src[q + 16 * k + l]! >>> shift) & 3;
            dst[out + l] = dl * (low - (src[o + 16 * k + l]! & m ? 0 : 4));
          }
        }
      }
    }
  }
}

/** Q4_K: `x = d · sc · q − dmin · m` per 32 weights, 6-bit sc and m, q in 0..15. */
export function dequantizeQ4K(
  src: Uint8Array,
  srcOffset: number,
  dst: Float32Array,
  dstOffset: number,
  n: number,
): void {
  checkBlockCall('Q4_K', QK_K, 144, src, srcOffset, dst, dstOffset, n);
  for (let b = 0, o = srcOffset, y = dstOffset; b < n / QK_K; b++, o += 144, y += QK_K) {
    const d = f16At(src, o);
    const dmin = f16At(src, o + 2);
    for (let j = 0; j < 4; j++) {
      const q = o + 16 + 32 * j;
      scaleMinK4(2 * j, src, o + 4, scMin);
      const d1 = d * scMin[0]!;
      const m1 = dmin * scMin[1]!;
      scaleMinK4(2 * j + 1, src, o + 4, scMin);
      const d2 = d * scMin[0]!;
      const m2 = dmin * scMin[1]!;
      const out = y + 64 * j;
      for (let l = 0; l < 32; l++) {
        const v = src[q + l]!;
        dst[out + l] = d1 * (v & 0xf) - m1;
        dst[out + 32 + l] = d2 * (v >>> 4) - m2;
      }
    }
  }
}

/** Q5_K: as Q4_K with a fifth code bit from `qh`, q in 0..31. */
export function dequantizeQ5K(
  src: Uint8Array,
  srcOffset: number,
  dst: Float32Array,
  dstOffset: number,
  n: number,
): void {
  checkBlockCall('Q5_K', QK_K, 176, src, srcOffset, dst, dstOffset, n);
  for (let b = 0, o = srcOffset, y = dstOffset; b < n / QK_K; b++, o += 176, y += QK_K) {
    const d = f16At(src, o);
    const dmin = f16At(src, o + 2);
    for (let j = 0; j < 4; j++) {
      const q = o + 48 + 32 * j;
      const u1 = 1 << (2 * j);
      const u2 = 2 << (2 * j);
      scaleMinK4(2 * j, src, o + 4, scMin);
      const d1 = d * scMin[0]!;
      const m1 = dmin * scMin[1]!;
      scaleMinK4(2 * j + 1, src, o + 4, scMin);
      const d2 = d * scMin[0]!;
      const m2 = dmin * scMin[1]!;
      const out = y + 64 * j;
      for (let l = 0; l < 32; l++) {
        const v = src[q + l]!;
        const h = src[o + 16 + l]!;
        dst[out + l] = d1 * ((v & 0xf) + (h & u1 ? 16 : 0)) - m1;
        dst[out + 32 + l] = d2 * ((v >>> 4) + (h & u2 ? 16 : 0)) - m2;
      }
    }
  }
}

/** Q6_K: `x = d · sc · (q − 32)` per 16 weights, int8 sc, q in 0..63. */
export function dequantizeQ6K(
  src: Uint8Array,
  srcOffset: number,
  dst: Float32Array,
  dstOffset: number,
  n: number,
): void {
  checkBlockCall('Q6_K', QK_K, 210, src, srcOffset, dst, dstOffset, n);
  for (let b = 0, o = srcOffset, y = dstOffset; b < n / QK_K; b++, o += 210, y += QK_K) {
    const d = f16At(src, o + 208);
    for (let half = 0; half < 2; half++) {
      const ql = o + 64 * half;
      const qh = o + 128 + 32 * half;
      const sc = o + 192 + 8 * half;
      const out = y + 128 * half;
      for (let l = 0; l < 32; l++) {
        const is = l >>> 4;
        const lo0 = src[ql + l]!;
        const lo1 = src[ql + l + 32]!;
        const h = src[qh + l]!;
        dst[out + l] = d * i8(src[sc + is + 0]!) * (((lo0 & 0xf) | ((h & 3) << 4)) - 32);
        dst[out + l + 32] =
          d * i8(src[sc + is + 2]!) * (((lo1 & 0xf) | (((h >>> 2) & 3) << 4)) - 32);
        dst[out + l + 64] =
          d * i8(src[sc + is + 4]!) * (((lo0 >>> 4) | (((h >>> 4) & 3) << 4)) - 32);
        dst[out + l + 96] =
          d * i8(src[sc + is + 6]!) * (((lo1 >>> 4) | (((h >>> 6) & 3) << 4)) - 32);
      }
    }
  }
}

// The reference quantizers (`quantize_row_q*_K_ref`, what llama-quantize uses without an
// importance matrix), transcribed with every f32 operation rounded by Math.fround in C's
// evaluation order. They are bit-exact with ggml compiled without floating-point contraction
// (`-ffp-contract=off`), which is what x86-64 builds of llama-quantize are in effect: these
// functions live in ggml-base, compiled without -mfma, so there is no FMA to contract into
// (their files are reproduced byte for byte, see tooling/ggml-fixtures). A build that fuses
// `a * b + c` (GCC's default where FMA exists, e.g. AArch64) can pick other codes in near-ties.

const GROUP_MAX_EPS = fr(1e-15);
const F01 = fr(0.1);
const L = new Uint8Array(QK_K);
const Laux = new Uint8Array(32);
const weights = new Float32Array(32);
const scales = new Float32Array(QK_K / 16);
const mins = new Float32Array(QK_K / 16);
const qx = new Int8Array(16);

/**
 * `make_qkx2_quants`: a scale and a (non-positive) minimum for `n` weights at `src[x]` with codes
 * 0..nmax in `L[lo ..]`, searching `nstep + 1` scales for the least weighted error. Returns the
 * scale; the minimum, negated as ggml returns it, goes to `mins[slot]`.
 */
function makeQkx2(
  n: number,
  nmax: number,
  src: Float32Array,
  x: number,
  lo: number,
  slot: number,
  rmin: number,
  rdelta: number,
  nstep: number,
  useMad: boolean,
): number {
  let min = src[x]!;
  let max = src[x]!;
  let sumW = weights[0]!;
  let sumX = fr(sumW * src[x]!);
  for (let i = 1; i < n; i++) {
    const v = src[x + i]!;
    if (v < min) min = v;
    if (v > max) max = v;
    const w = weights[i]!;
    sumW = fr(sumW + w);
    sumX = fr(sumX + fr(w * v));
  }
  if (min > 0) min = 0;
  if (max === min) {
    L.fill(0, lo, lo + n);
    mins[slot] = -min;
    return 0;
  }
  let iscale = fr(nmax / fr(max - min));
  let scale = fr(1 / iscale);
  let bestError = 0;
  for (let i = 0; i < n; i++) {
    const v = src[x + i]!;
    const l = Math.max(0, Math.min(nmax, nearestInt(fr(iscale * fr(v - min)))));
    L[lo + i] = l;
    let diff = fr(fr(fr(scale * l) + min) - v);
    diff = useMad ? Math.abs(diff) : fr(diff * diff);
    bestError = fr(bestError + fr(weights[i]! * diff));
  }
  for (let is = 0; is <= nstep; is++) {
    // `min` moves to each better fit's minimum, and the next candidates scale from it.
    iscale = fr(fr(fr(rmin + fr(rdelta * is)) + nmax) / fr(max - min));
    let sumL = 0;
    let sumL2 = 0;
    let sumXL = 0;
    for (let i = 0; i < n; i++) {
      const v = src[x + i]!;
      const l = Math.max(0, Math.min(nmax, nearestInt(fr(iscale * fr(v - min)))));
      Laux[i] = l;
      const wl = fr(weights[i]! * l);
      sumL = fr(sumL + wl);
      sumL2 = fr(sumL2 + fr(wl * l));
      sumXL = fr(sumXL + fr(wl * v));
    }
    const D = fr(fr(sumW * sumL2) - fr(sumL * sumL));
    if (D > 0) {
      let thisScale = fr(fr(fr(sumW * sumXL) - fr(sumX * sumL)) / D);
      let thisMin = fr(fr(fr(sumL2 * sumX) - fr(sumL * sumXL)) / D);
      if (thisMin > 0) {
        thisMin = 0;
        thisScale = fr(sumXL / sumL2);
      }
      let curError = 0;
      for (let i = 0; i < n; i++) {
        let diff = fr(fr(fr(thisScale * Laux[i]!) + thisMin) - src[x + i]!);
        diff = useMad ? Math.abs(diff) : fr(diff * diff);
        curError = fr(curError + fr(weights[i]! * diff));
      }
      if (curError < bestError) {
        L.set(Laux.subarray(0, n), lo);
        bestError = curError;
        scale = thisScale;
        min = thisMin;
      }
    }
  }
  mins[slot] = -min;
  return scale;
}

/** The signed value of largest magnitude of `src[x .. x + n)` (the first on ties), or 0. */
function signedAmax(src: Float32Array, x: number, n: number): number {
  let amax = 0;
  let max = 0;
  for (let i = 0; i < n; i++) {
    const ax = Math.abs(src[x + i]!);
    if (ax > amax) {
      amax = ax;
      max = src[x + i]!;
    }
  }
  return amax < GROUP_MAX_EPS ? 0 : max;
}

/**
 * `make_qx_quants` with `rmse_type` 1 (weights x²), no importance weights: symmetric codes
 * −nmax..nmax−1 stored biased by nmax in `L[lo ..]`; returns the scale.
 */
function makeQx(n: number, nmax: number, src: Float32Array, x: number, lo: number): number {
  const max = signedAmax(src, x, n);
  if (max === 0) {
    L.fill(0, lo, lo + n);
    return 0;
  }
  let iscale = fr(-nmax / max);
  let sumlx = 0;
  let suml2 = 0;
  for (let i = 0; i < n; i++) {
    const v = src[x + i]!;
    const l = Math.max(-nmax, Math.min(nmax - 1, nearestInt(fr(iscale * v))));
    L[lo + i] = l + nmax;
    const w = fr(v * v);
    sumlx = fr(sumlx + fr(fr(w * v) * l));
    suml2 = fr(suml2 + fr(fr(w * l) * l));
  }
  let scale = suml2 ? fr(sumlx / suml2) : 0;
  let best = fr(scale * sumlx);
  for (let is = -9; is <= 9; is++) {
    if (is === 0) continue;
    iscale = fr(-fr(nmax + fr(F01 * is)) / max);
    sumlx = 0;
    suml2 = 0;
    for (let i = 0; i < n; i++) {
      const v = src[x + i]!;
      const l = Math.max(-nmax, Math.min(nmax - 1, nearestInt(fr(iscale * v))));
      const w = fr(v * v);
      sumlx = fr(sumlx + fr(fr(w * v) * l));
      suml2 = fr(suml2 + fr(fr(w * l) * l));
    }
    if (suml2 > 0 && fr(sumlx * sumlx) > fr(best * suml2)) {
      for (let i = 0; i < n; i++) {
        const l = nearestInt(fr(iscale * src[x + i]!));
        L[lo + i] = nmax + Math.max(-nmax, Math.min(nmax - 1, l));
      }
      scale = fr(sumlx / suml2);
      best = fr(scale * sumlx);
    }
  }
  return scale;
}

/** `make_q3_quants` with `do_rmse`: codes −4..3 refined by coordinate descent, biased by 4. */
function makeQ3(src: Float32Array, x: number, lo: number): number {
  const n = 16;
  const nmax = 4;
  const max = signedAmax(src, x, n);
  if (max === 0) {
    L.fill(0, lo, lo + n);
    return 0;
  }
  const iscale = fr(-nmax / max);
  let sumlx = 0;
  let suml2 = 0;
  for (let i = 0; i < n; i++) {
    const v = src[x + i]!;
    const l = Math.max(-nmax, Math.min(nmax - 1, nearestInt(fr(iscale * v))));
    qx[i] = l;
    const w = fr(v * v);
    sumlx = fr(sumlx + fr(fr(w * v) * l));
    suml2 = fr(suml2 + fr(fr(w * l) * l));
  }
  for (let itry = 0; itry < 5; itry++) {
    let changed = 0;
    for (let i = 0; i < n; i++) {
      const v = src[x + i]!;
      const w = fr(v * v);
      const li = qx[i]!;
      let slx = fr(sumlx - fr(fr(w * v) * li));
      if (slx > 0) {
        let sl2 = fr(suml2 - fr(fr(w * li) * li));
        const nl = Math.max(-nmax, Math.min(nmax - 1, nearestInt(fr(fr(v * sl2) / slx))));
        if (nl !== li) {
          slx = fr(slx + fr(fr(w * v) * nl));
          sl2 = fr(sl2 + fr(fr(w * nl) * nl));
          if (sl2 > 0 && fr(fr(slx * slx) * suml2) > fr(fr(sumlx * sumlx) * sl2)) {
            qx[i] = nl;
            sumlx = slx;
            suml2 = sl2;
            changed++;
          }
        }
      }
    }
    if (!changed) break;
  }
  for (let i = 0; i < n; i++) L[lo + i] = qx[i]! + nmax;
  return suml2 > 0 ? fr(sumlx / suml2) : 0;
}

/** Packs 2-bit codes `L` of one super-block as Q2_K / Q3_K `qs` (4 codes 32 apart per byte). */
function pack2Bit(dst: Uint8Array, q: number): void {
  for (let j = 0; j < QK_K; j += 128) {
    for (let l = 0; l < 32; l++) {
      dst[q + j / 4 + l] =
        L[j + l]! | (L[j + l + 32]! << 2) | (L[j + l + 64]! << 4) | (L[j + l + 96]! << 6);
    }
  }
}

/** `quantize_row_q2_K_ref`. */
export function quantizeQ2K(
  src: Float32Array,
  srcOffset: number,
  dst: Uint8Array,
  dstOffset: number,
  n: number,
): void {
  checkBlockCall('Q2_K', QK_K, 84, dst, dstOffset, src, srcOffset, n);
  const q4scale = 15;
  for (let b = 0, x = srcOffset, o = dstOffset; b < n / QK_K; b++, x += QK_K, o += 84) {
    let maxScale = 0;
    let maxMin = 0;
    for (let j = 0; j < 16; j++) {
      for (let l = 0; l < 16; l++) weights[l] = Math.abs(src[x + 16 * j + l]!);
      scales[j] = makeQkx2(16, 3, src, x + 16 * j, 16 * j, j, -0.5, F01, 15, true);
      if (scales[j]! > maxScale) maxScale = scales[j]!;
      if (mins[j]! > maxMin) maxMin = mins[j]!;
    }
    if (maxScale > 0) {
      const iscale = fr(q4scale / maxScale);
      for (let j = 0; j < 16; j++) dst[o + j] = nearestInt(fr(iscale * scales[j]!)) & 0xff;
      putF16(dst, o + 80, f32ToF16Bits(fr(maxScale / q4scale)));
    } else {
      dst.fill(0, o, o + 16);
      putF16(dst, o + 80, 0);
    }
    if (maxMin > 0) {
      const iscale = fr(q4scale / maxMin);
      for (let j = 0; j < 16; j++)
        dst[o + j] = dst[o + j]! | ((nearestInt(fr(iscale * mins[j]!)) << 4) & 0xff);
      putF16(dst, o + 82, f32ToF16Bits(fr(maxMin / q4scale)));
    } else {
      putF16(dst, o + 82, 0);
    }
    const d = f16At(dst, o + 80);
    const dmin = f16At(dst, o + 82);
    for (let j = 0; j < 16; j++) {
      const dl = fr(d * (dst[o + j]! & 0xf));
      if (!dl) continue;
      const dm = fr(dmin * (dst[o + j]! >>> 4));
      for (let ii = 0; ii < 16; ii++) {
        const l = nearestInt(fr(fr(src[x + 16 * j + ii]! + dm) / dl));
        L[16 * j + ii] = Math.max(0, Math.min(3, l));
      }
    }
    pack2Bit(dst, o + 16);
  }
}

/** `quantize_row_q3_K_ref`. */
export function quantizeQ3K(
  src: Float32Array,
  srcOffset: number,
  dst: Uint8Array,
  dstOffset: number,
  n: number,
): void {
  checkBlockCall('Q3_K', QK_K, 110, dst, dstOffset, src, srcOffset, n);
  for (let b = 0, x = srcOffset, o = dstOffset; b < n / QK_K; b++, x += QK_K, o += 110) {
    let maxScale = 0;
    let amax = 0;
    for (let j = 0; j < 16; j++) {
      scales[j] = makeQ3(src, x + 16 * j, 16 * j);
      const s = Math.abs(scales[j]!);
      if (s > amax) {
        amax = s;
        maxScale = scales[j]!;
      }
    }
    const sc = o + 96;
    dst.fill(0, sc, sc + 12);
    if (maxScale) {
      const iscale = fr(-32 / maxScale);
      for (let j = 0; j < 16; j++) {
        const l = Math.max(-32, Math.min(31, i8(nearestInt(fr(iscale * scales[j]!)) & 0xff))) + 32;
        if (j < 8) dst[sc + j] = l & 0xf;
        else dst[sc + j - 8] = dst[sc + j - 8]! | ((l & 0xf) << 4);
        dst[sc + 8 + (j % 4)] = dst[sc + 8 + (j % 4)]! | ((l >> 4) << (2 * (j >>> 2)));
      }
      putF16(dst, o + 108, f32ToF16Bits(fr(1 / iscale)));
    } else {
      putF16(dst, o + 108, 0);
    }
    const dAll = f16At(dst, o + 108);
    for (let j = 0; j < 16; j++) {
      const d = fr(dAll * scaleQ3K(j, dst, sc));
      if (!d) continue;
      for (let ii = 0; ii < 16; ii++) {
        const l = nearestInt(fr(src[x + 16 * j + ii]! / d));
        L[16 * j + ii] = Math.max(-4, Math.min(3, l)) + 4;
      }
    }
    dst.fill(0, o, o + 32);
    for (let j = 0, m = 0, hm = 1; j < QK_K; j++) {
      if (L[j]! > 3) {
        dst[o + m] = dst[o + m]! | hm;
        L[j] = L[j]! - 4;
      }
      if (++m === 32) {
        m = 0;
        hm <<= 1;
      }
    }
    pack2Bit(dst, o + 32);
  }
}

/** Shared by Q4_K and Q5_K: per-32 scales and mins, their 6-bit codes, then the weights' codes. */
function quantizeQxK(
  src: Float32Array,
  x: number,
  dst: Uint8Array,
  o: number,
  nmax: number,
  rmin: number,
  nstep: number,
): void {
  let maxScale = 0;
  let maxMin = 0;
  for (let j = 0; j < 8; j++) {
    let sumX2 = 0;
    for (let l = 0; l < 32; l++) {
      const v = src[x + 32 * j + l]!;
      sumX2 = fr(sumX2 + fr(v * v));
    }
    const avX = fr(Math.sqrt(fr(sumX2 / 32)));
    for (let l = 0; l < 32; l++) weights[l] = fr(avX + Math.abs(src[x + 32 * j + l]!));
    scales[j] = makeQkx2(32, nmax, src, x + 32 * j, 32 * j, j, rmin, F01, nstep, false);
    if (scales[j]! > maxScale) maxScale = scales[j]!;
    if (mins[j]! > maxMin) maxMin = mins[j]!;
  }
  const invScale = maxScale > 0 ? fr(63 / maxScale) : 0;
  const invMin = maxMin > 0 ? fr(63 / maxMin) : 0;
  const s = o + 4;
  for (let j = 0; j < 8; j++) {
    const ls = Math.min(63, nearestInt(fr(invScale * scales[j]!)) & 0xff);
    const lm = Math.min(63, nearestInt(fr(invMin * mins[j]!)) & 0xff);
    if (j < 4) {
      dst[s + j] = ls;
      dst[s + j + 4] = lm;
    } else {
      dst[s + j + 4] = (ls & 0xf) | ((lm & 0xf) << 4);
      dst[s + j - 4] = dst[s + j - 4]! | ((ls >>> 4) << 6);
      dst[s + j] = dst[s + j]! | ((lm >>> 4) << 6);
    }
  }
  putF16(dst, o, f32ToF16Bits(fr(maxScale / 63)));
  putF16(dst, o + 2, f32ToF16Bits(fr(maxMin / 63)));
  const dAll = f16At(dst, o);
  const dminAll = f16At(dst, o + 2);
  for (let j = 0; j < 8; j++) {
    scaleMinK4(j, dst, s, scMin);
    const d = fr(dAll * scMin[0]!);
    if (!d) continue;
    const dm = fr(dminAll * scMin[1]!);
    for (let ii = 0; ii < 32; ii++) {
      const l = nearestInt(fr(fr(src[x + 32 * j + ii]! + dm) / d));
      L[32 * j + ii] = Math.max(0, Math.min(nmax, l));
    }
  }
}

/** `quantize_row_q4_K_ref`. */
export function quantizeQ4K(
  src: Float32Array,
  srcOffset: number,
  dst: Uint8Array,
  dstOffset: number,
  n: number,
): void {
  checkBlockCall('Q4_K', QK_K, 144, dst, dstOffset, src, srcOffset, n);
  for (let b = 0, x = srcOffset, o = dstOffset; b < n / QK_K; b++, x += QK_K, o += 144) {
    quantizeQxK(src, x, dst, o, 15, -1, 20);
    for (let j = 0; j < 4; j++) {
      for (let l = 0; l < 32; l++)
        dst[o + 16 + 32 * j + l] = L[64 * j + l]! | (L[64 * j + l + 32]! << 4);
    }
  }
}

/** `quantize_row_q5_K_ref`. */
export function quantizeQ5K(
  src: Float32Array,
  srcOffset: number,
  dst: Uint8Array,
  dstOffset: number,
  n: number,
): void {
  checkBlockCall('Q5_K', QK_K, 176, dst, dstOffset, src, srcOffset, n);
  for (let b = 0, x = srcOffset, o = dstOffset; b < n / QK_K; b++, x += QK_K, o += 176) {
    quantizeQxK(src, x, dst, o, 31, -0.5, 15);
    const qh = o + 16;
    dst.fill(0, qh, qh + 32);
    for (let j = 0; j < 4; j++) {
      const m1 = 1 << (2 * j);
      const m2 = 2 << (2 * j);
      for (let l = 0; l < 32; l++) {
        let l1 = L[64 * j + l]!;
        let l2 = L[64 * j + l + 32]!;
        if (l1 > 15) {
          l1 -= 16;
          dst[qh + l] = dst[qh + l]! | m1;
        }
        if (l2 > 15) {
          l2 -= 16;
          dst[qh + l] = dst[qh + l]! | m2;
        }
        dst[o + 48 + 32 * j + l] = l1 | (l2 << 4);
      }
    }
  }
}

/** `quantize_row_q6_K_ref`. */
export function quantizeQ6K(
  src: Float32Array,
  srcOffset: number,
  dst: Uint8Array,
  dstOffset: number,
  n: number,
): void {
  checkBlockCall('Q6_K', QK_K, 210, dst, dstOffset, src, srcOffset, n);
  for (let b = 0, x = srcOffset, o = dstOffset; b < n / QK_K; b++, x += QK_K, o += 210) {
    let maxScale = 0;
    let maxAbsScale = 0;
    for (let ib = 0; ib < 16; ib++) {
      const scale = makeQx(16, 32, src, x + 16 * ib, 16 * ib);
      scales[ib] = scale;
      if (Math.abs(scale) > maxAbsScale) {
        maxAbsScale = Math.abs(scale);
        maxScale = scale;
      }
    }
    if (maxAbsScale < GROUP_MAX_EPS) {
      dst.fill(0, o, o + 210);
      continue;
    }
    const iscale = fr(-128 / maxScale);
    putF16(dst, o + 208, f32ToF16Bits(fr(1 / iscale)));
    for (let ib = 0; ib < 16; ib++)
      dst[o + 192 + ib] = Math.min(127, nearestInt(fr(iscale * scales[ib]!))) & 0xff;
    const dAll = f16At(dst, o + 208);
    for (let j = 0; j < 16; j++) {
      const d = fr(dAll * i8(dst[o + 192 + j]!));
      if (!d) continue;
      for (let ii = 0; ii < 16; ii++) {
        const l = nearestInt(fr(src[x + 16 * j + ii]! / d));
        L[16 * j + ii] = Math.max(-32, Math.min(31, l)) + 32;
      }
    }
    for (let j = 0; j < QK_K; j += 128) {
      const ql = o + j / 2;
      const qh = o + 128 + j / 4;
      for (let l = 0; l < 32; l++) {
        const a = L[j + l]!;
        const b2 = L[j + l + 32]!;
        const c = L[j + l + 64]!;
        const e = L[j + l + 96]!;
        dst[ql + l] = (a & 0xf) | ((c & 0xf) << 4);
        dst[ql + l + 32] = (b2 & 0xf) | ((e & 0xf) << 4);
        dst[qh + l] = (a >>> 4) | ((b2 >>> 4) << 2) | ((c >>> 4) << 4) | ((e >>> 4) << 6);
      }
    }
  }
}
