// 8-bit activations against weight codes, in the two builds of the kernels (scripts/build-wasm.mjs).
//
// Activations are quantized per block of 32 (q = round(x · 127 / max|x|), so |q| <= 127, with
// the block's scale d = max|x| / 127 and the sums of q per 16). A dot primitive takes 16 weight
// codes in a v128 and the 16 activation codes at `x`, and adds to an i32x4 accumulator; lane i
// receives the products of positions 4i .. 4i + 3, in both builds, so both give the same
// integers in every lane, hence bit for bit the same results.
//
// - relaxed build (KVASIR_RELAXED): activations stored as int8; one
//   `i32x4.relaxed_dot_i8x16_i7x16_add_s` per 16 codes. That instruction is deterministic only
//   when its second operand lies in [0, 127], so that operand is always the unsigned one: the
//   weight codes (dot_u: nibbles, 5- and 6-bit codes, whose offsets the callers take from the
//   activation sums), or |x| with x's sign moved onto the weights (dot_s: Q8_0, IQ4_NL, whose
//   codes lie in [-127, 127]).
// - plain build: activations stored as int16, each 16 in the order x0 x2 .. x14 x1 x3 .. x15,
//   so that two `i32x4.dot_i16x8_s` on the even and odd bytes of the codes (widened with one
//   mask or shift each) give the same lanes as the relaxed dot.
//
// Clang 14 has no relaxed-dot intrinsic (nor the instruction in its assembler). The relaxed
// build writes `f32x4.fma` (clang 14's name for the prototype relaxed madd, emitted by
// __builtin_wasm_fma_f32x4, used nowhere else) in its place, operands in the same order, and
// scripts/wasm-relaxed-dot.mjs rewrites every such instruction of the linked module to
// `i32x4.relaxed_dot_i8x16_i7x16_add_s`: both encode in three bytes (fd af 01 and fd 93 02).

#ifndef KVASIR_INT8_DOT_H
#define KVASIR_INT8_DOT_H

#include "common.h"

#ifdef KVASIR_RELAXED

/** An activation code: int8. */
typedef int8_t xq_t;

// c + Σ a·b per group of 4 bytes (a signed, b in [0, 127]): becomes the relaxed dot post-link.
INLINE v128_t relaxed_dot(v128_t a, v128_t b, v128_t c) {
  return (v128_t)__builtin_wasm_fma_f32x4((__f32x4)a, (__f32x4)b, (__f32x4)c);
}

// acc + the dot of 16 unsigned codes w (each in [0, 127]) with the activations at x.
INLINE v128_t dot_u(v128_t acc, v128_t w, const xq_t* x) { return relaxed_dot(ld(x), w, acc); }

// acc + the dot of 16 signed codes w (each in [-127, 127]) with the activations at x.
INLINE v128_t dot_s(v128_t acc, v128_t w, const xq_t* x) {
  v128_t xv = ld(x);
  v128_t neg = wasm_i8x16_lt(xv, wasm_i8x16_splat(0));
  v128_t ws = wasm_i8x16_sub(wasm_v128_xor(w, neg), neg);
  return relaxed_dot(ws, wasm_i8x16_abs(xv), acc);
}

#else

typedef int16_t xq_t;

INLINE v128_t dot_u(v128_t acc, v128_t w, const xq_t* x) {
  v128_t even = wasm_v128_and(w, wasm_i16x8_splat(0xff));
  v128_t odd = wasm_u16x8_shr(w, 8);
  acc = wasm_i32x4_add(acc, wasm_i32x4_dot_i16x8(even, ld(x)));
  return wasm_i32x4_add(acc, wasm_i32x4_dot_i16x8(odd, ld(x + 8)));
}

INLINE v128_t dot_s(v128_t acc, v128_t w, const xq_t* x) {
  v128_t even = wasm_i16x8_shr(wasm_i16x8_shl(w, 8), 8);
  v128_t odd = wasm_i16x8_shr(w, 8);
  acc = wasm_i32x4_add(acc, wasm_i32x4_dot_i16x8(even, ld(x)));
  return wasm_i32x4_add(acc, wasm_i32x4_dot_i16x8(odd, ld(x + 8)));
}

#endif

// Bytes of one quantized row of k activations (the same in both builds): codes (2k bytes,
// half of them used by the relaxed build), k / 32 f32 scales, k / 16 f32 sums (scale · Σq).
#define XQ_ROW_BYTES(k) (2 * (k) + (k) / 8 + (k) / 4)

/** A quantized activation row: codes, per-32 scales, per-16 scaled sums. */
typedef struct {
  const xq_t* q;
  const float* s;
  const float* b;
} xrow_t;

INLINE xrow_t xrow_at(const uint8_t* base, i32 k, i32 i) {
  const uint8_t* p = base + (long)i * XQ_ROW_BYTES(k);
  xrow_t r = {(const xq_t*)p, (const float*)(p + 2 * k), (const float*)(p + 2 * k + k / 8)};
  return r;
}

// Blocks [lo, hi) of the m · k / 32 blocks of x[m][k], quantized into rows of XQ_ROW_BYTES(k)
// at out.
static inline void quantize_blocks(const float* x, i32 k, i32 lo, i32 hi, uint8_t* out) {
  i32 per = k / 32;
  v128_t ones = wasm_i16x8_splat(1);
  for (i32 blk = lo; blk < hi; blk++) {
    i32 row = blk / per, b = blk % per;
    const float* xb = x + (long)row * k + 32 * b;
    uint8_t* p = out + (long)row * XQ_ROW_BYTES(k);
    xq_t* q = (xq_t*)p + 32 * b;
    float* s = (float*)(p + 2 * k) + b;
    float* sums = (float*)(p + 2 * k + k / 8) + 2 * b;
    v128_t mx = wasm_f32x4_abs(ld(xb));
    for (i32 i = 4; i < 32; i += 4) mx = wasm_f32x4_max(mx, wasm_f32x4_abs(ld(xb + i)));
    float amax = wasm_f32x4_extract_lane(mx, 0);
    float m1 = wasm_f32x4_extract_lane(mx, 1);
    float m2 = wasm_f32x4_extract_lane(mx, 2);
    float m3 = wasm_f32x4_extract_lane(mx, 3);
    if (m1 > amax) amax = m1;
    if (m2 > amax) amax = m2;
    if (m3 > amax) amax = m3;
    // A NaN or infinity in the block makes its scale NaN, so the row's outputs are NaN as the
    // f32 dot's would be (the codes alone would turn them into finite numbers): f32x4.max keeps
    // NaNs and mx - mx is NaN in a lane holding a NaN or an infinity, +0 otherwise, so d is
    // unchanged, bit for bit, for a finite block.
    v128_t nf = wasm_f32x4_sub(mx, mx);
    nf = wasm_f32x4_add(nf, wasm_i32x4_shuffle(nf, nf, 2, 3, 0, 1));
    nf = wasm_f32x4_add(nf, wasm_i32x4_shuffle(nf, nf, 1, 0, 3, 2));
    float d = amax / 127.0f + wasm_f32x4_extract_lane(nf, 0);
    v128_t inv = wasm_f32x4_splat(amax > 0.0f ? 127.0f / amax : 0.0f);
    *s = d;
    for (i32 g = 0; g < 2; g++) {
      const float* xg = xb + 16 * g;
      v128_t h[2];
      for (i32 hh = 0; hh < 2; hh++) {
        v128_t q0 = wasm_i32x4_trunc_sat_f32x4(
            wasm_f32x4_nearest(wasm_f32x4_mul(ld(xg + 8 * hh), inv)));
        v128_t q1 = wasm_i32x4_trunc_sat_f32x4(
            wasm_f32x4_nearest(wasm_f32x4_mul(ld(xg + 8 * hh + 4), inv)));
        h[hh] = wasm_i16x8_narrow_i32x4(q0, q1);
      }
      v128_t t = wasm_i32x4_add(wasm_i32x4_dot_i16x8(h[0], ones), wasm_i32x4_dot_i16x8(h[1], ones));
      i32 sum = wasm_i32x4_extract_lane(t, 0) + wasm_i32x4_extract_lane(t, 1) +
                wasm_i32x4_extract_lane(t, 2) + wasm_i32x4_extract_lane(t, 3);
      sums[g] = d * (float)sum;
#ifdef KVASIR_RELAXED
      wasm_v128_store(q + 16 * g, wasm_i8x16_narrow_i16x8(h[0], h[1]));
#else
      wasm_v128_store(q + 16 * g, wasm_i16x8_shuffle(h[0], h[1], 0, 2, 4, 6, 8, 10, 12, 14));
      wasm_v128_store(q + 16 * g + 8, wasm_i16x8_shuffle(h[0], h[1], 1, 3, 5, 7, 9, 11, 13, 15));
#endif
    }
  }
}

#endif
