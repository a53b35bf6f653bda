// Matrix products straight from GGML blocks (a GGUF file's Q8_0, Q4_K, Q6_K, ... bytes, as
// loaded), so a quantized model costs its file's bytes in memory and per decode step.
//
// The approach is llama.cpp's, with 16-bit activations: each x row is rounded once per matmul
// to int16 per block of 32 (scale max|x| / 32767, so its error is 2^-16 of the block's largest
// value, far below any weight format's), and weight rows are unpacked in pairs once per block
// of TB tokens into int16 codes with one f32 scale per 32 and one f32 offset per 16 (the
// minimums of the `_1` and K formats). A dot product is then i16 × i16 in i32
// (`i32x4.dot_i16x8_s`), 2 rows × 2 tokens per loop, one float multiply per 32 weights, plus
// the offsets against x's per-16 sums. 8-bit activations would not be faster here: SIMD128 has
// no i8 dot product, so they widen to i16 all the same. Decode (one token) of Q8_0, Q4_0, Q4_K,
// Q5_K and Q6_K skips the unpacked row: two rows at a time, codes widened in registers straight
// from the blocks (matvec_fused).
//
// Sub-block scales that are small integers (Q2_K, Q3_K, Q6_K: per 16 weights) are folded into
// the codes: |code · scale| <= 4096, so a lane's eight products per block stay below 2^30.

#include "ggml-matmul.h"

#include "common.h"
#include "matmul-epilogue.h"

typedef int16_t i16;
typedef uint8_t u8;

// Token rows quantized together: weight rows are unpacked once per block of this many tokens.
#define TB 16

INLINE float f16_at(const u8* p) { return f16_to_f32((u32)p[0] | ((u32)p[1] << 8)); }

// Sixteen signed bytes to int16 at q[0..16).
INLINE void put_i8(i16* q, v128_t b) {
  wasm_v128_store(q, wasm_i16x8_extend_low_i8x16(b));
  wasm_v128_store(q + 8, wasm_i16x8_extend_high_i8x16(b));
}

// Sixteen signed bytes times a small integer scale, to int16 at q[0..16).
INLINE void put_i8_scaled(i16* q, v128_t b, i32 s) {
  v128_t sv = wasm_i16x8_splat((i16)s);
  wasm_v128_store(q, wasm_i16x8_mul(wasm_i16x8_extend_low_i8x16(b), sv));
  wasm_v128_store(q + 8, wasm_i16x8_mul(wasm_i16x8_extend_high_i8x16(b), sv));
}

// ---------------------------------------------------------------------------------------------
// Block unpackers: one block to int16 codes q[blockSize], scales d[blockSize / 32] and offsets
// m[blockSize / 16], with weight i = d[i / 32] · q[i] + m[i / 16]. Layouts as ggml-common.h
// (and @kvasir/quantizer's decoders, the reference the tests hold these to).

static void unpack_q8_0(const u8* b, i16* q, float* d, float* m) {
  (void)m;
  d[0] = f16_at(b);
  put_i8(q, ld(b + 2));
  put_i8(q + 16, ld(b + 18));
}

// Q4_0 / IQ4_NL share a layout: byte j holds weight j (low nibble) and j + 16 (high).
static void unpack_q4_0(const u8* b, i16* q, float* d, float* m) {
  (void)m;
  d[0] = f16_at(b);
  v128_t v = ld(b + 2);
  v128_t lo = wasm_v128_and(v, wasm_i8x16_splat(15));
  v128_t hi = wasm_u8x16_shr(v, 4);
  v128_t eight = wasm_i8x16_splat(8);
  put_i8(q, wasm_i8x16_sub(lo, eight));
  put_i8(q + 16, wasm_i8x16_sub(hi, eight));
}

static void unpack_iq4_nl(const u8* b, i16* q, float* d, float* m) {
  (void)m;
  d[0] = f16_at(b);
  // ggml's kvalues_iq4nl, looked up sixteen at a time.
  const v128_t table = wasm_i8x16_const(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38,
                                        53, 69, 89, 113);
  v128_t v = ld(b + 2);
  put_i8(q, wasm_i8x16_swizzle(table, wasm_v128_and(v, wasm_i8x16_splat(15))));
  put_i8(q + 16, wasm_i8x16_swizzle(table, wasm_u8x16_shr(v, 4)));
}

static void unpack_q4_1(const u8* b, i16* q, float* d, float* m) {
  d[0] = f16_at(b);
  m[0] = m[1] = f16_at(b + 2);
  v128_t v = ld(b + 4);
  put_i8(q, wasm_v128_and(v, wasm_i8x16_splat(15)));
  put_i8(q + 16, wasm_u8x16_shr(v, 4));
}

INLINE u32 u32_at(const u8* p) {
  return (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24);
}

// The fifth bits of a Q5 block: bit j of qh belongs to weight j.
static void unpack_q5(const u8* qs, u32 qh, i16* q, i32 bias) {
  for (i32 j = 0; j < 16; j++) {
    q[j] = (i16)(((qs[j] & 15) | (((qh >> j) & 1) << 4)) - bias);
    q[j + 16] = (i16)(((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - bias);
  }
}

static void unpack_q5_0(const u8* b, i16* q, float* d, float* m) {
  (void)m;
  d[0] = f16_at(b);
  unpack_q5(b + 6, u32_at(b + 2), q, 16);
}

static void unpack_q5_1(const u8* b, i16* q, float* d, float* m) {
  d[0] = f16_at(b);
  m[0] = m[1] = f16_at(b + 2);
  unpack_q5(b + 8, u32_at(b + 4), q, 0);
}

// v >> 2j in every byte by a constant shift: V8 turns an i8x16 shift by a variable amount into
// a long instruction sequence.
INLINE v128_t shr_2j(v128_t v, i32 j) {
  if (j == 0) return v;
  if (j == 1) return wasm_u8x16_shr(v, 2);
  if (j == 2) return wasm_u8x16_shr(v, 4);
  return wasm_u8x16_shr(v, 6);
}

// Q2_K: 16 groups of 16, group g = 8·half + 2·j + k holding bits 2j.. of qs[32·half + 16·k ..].
static void unpack_q2_k(const u8* b, i16* q, float* d, float* m) {
  float dd = f16_at(b + 80);
  float dmin = f16_at(b + 82);
  for (i32 i = 0; i < 8; i++) d[i] = dd;
  v128_t three = wasm_i8x16_splat(3);
  for (i32 half = 0; half < 2; half++) {
    for (i32 k = 0; k < 2; k++) {
      v128_t v = ld(b + 16 + 32 * half + 16 * k);
      for (i32 j = 0; j < 4; j++) {
        i32 g = 8 * half + 2 * j + k;
        u8 sc = b[g];
        m[g] = -dmin * (float)(sc >> 4);
        put_i8_scaled(q + 16 * g, wasm_v128_and(shr_2j(v, j), three), sc & 15);
      }
    }
  }
}

// Q3_K: as Q2_K's code layout, minus 4 where the group's hmask bit is clear, signed 6-bit scales.
static void unpack_q3_k(const u8* b, i16* q, float* d, float* m) {
  (void)m;
  float dd = f16_at(b + 108);
  for (i32 i = 0; i < 8; i++) d[i] = dd;
  const u8* sc = b + 96;
  v128_t three = wasm_i8x16_splat(3);
  v128_t four = wasm_i8x16_splat(4);
  for (i32 half = 0; half < 2; half++) {
    for (i32 k = 0; k < 2; k++) {
      v128_t v = ld(b + 32 + 32 * half + 16 * k);
      v128_t hm = ld(b + 16 * k);
      for (i32 j = 0; j < 4; j++) {
        i32 g = 8 * half + 2 * j + k;
        i32 lo = (sc[g & 7] >> (4 * (g >> 3))) & 15;
        i32 hi = (sc[8 + (g & 3)] >> (2 * (g >> 2))) & 3;
        v128_t low = wasm_v128_and(shr_2j(v, j), three);
        v128_t bit = wasm_v128_and(hm, wasm_i8x16_splat((int8_t)(1 << (4 * half + j))));
        // where the bit is clear, subtract 4
        v128_t sub = wasm_v128_and(wasm_i8x16_eq(bit, wasm_i8x16_splat(0)), four);
        put_i8_scaled(q + 16 * g, wasm_i8x16_sub(low, sub), (lo | (hi << 4)) - 32);
      }
    }
  }
}

// The 6-bit scale and min of sub-block j of a Q4_K / Q5_K block (ggml's get_scale_min_k4).
INLINE void scale_min_k4(i32 j, const u8* s, i32* sc, i32* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q4_K and Q5_K: 8 sub-blocks of 32 with their own scale and minimum; sub-block 2j takes the low
// nibbles of qs[32j ..], 2j + 1 the high ones, Q5_K's fifth bits from qh bits 2j and 2j + 1.
static void unpack_qk_k(const u8* b, const u8* qs, const u8* qh, i16* q, float* d, float* m) {
  float dd = f16_at(b);
  float dmin = f16_at(b + 2);
  v128_t mask = wasm_i8x16_splat(15);
  v128_t h0 = qh ? ld(qh) : wasm_i8x16_splat(0);
  v128_t h1 = qh ? ld(qh + 16) : h0;
  v128_t sixteen = wasm_i8x16_splat(16);
  for (i32 s = 0; s < 8; s++) {
    i32 sc, mn;
    scale_min_k4(s, b + 4, &sc, &mn);
    d[s] = dd * (float)sc;
    m[2 * s] = m[2 * s + 1] = -dmin * (float)mn;
    const u8* p = qs + 32 * (s >> 1);
    v128_t a = ld(p), c = ld(p + 16);
    if (s & 1) {
      a = wasm_u8x16_shr(a, 4);
      c = wasm_u8x16_shr(c, 4);
    } else {
      a = wasm_v128_and(a, mask);
      c = wasm_v128_and(c, mask);
    }
    if (qh) {
      v128_t bit = wasm_i8x16_splat((int8_t)(1 << s));
      v128_t zero = wasm_i8x16_splat(0);
      a = wasm_v128_or(a, wasm_v128_and(wasm_i8x16_ne(wasm_v128_and(h0, bit), zero), sixteen));
      c = wasm_v128_or(c, wasm_v128_and(wasm_i8x16_ne(wasm_v128_and(h1, bit), zero), sixteen));
    }
    put_i8(q + 32 * s, a);
    put_i8(q + 32 * s + 16, c);
  }
}

static void unpack_q4_k(const u8* b, i16* q, float* d, float* m) {
  unpack_qk_k(b, b + 16, 0, q, d, m);
}

static void unpack_q5_k(const u8* b, i16* q, float* d, float* m) {
  unpack_qk_k(b, b + 48, b + 16, q, d, m);
}

// Q6_K: per half of 128, quarter k (32 weights) takes nibble k >> 1 of ql[32·(k & 1) ..] and
// bits 2k of qh, minus 32; int8 scales per 16.
static void unpack_q6_k(const u8* b, i16* q, float* d, float* m) {
  (void)m;
  float dd = f16_at(b + 208);
  for (i32 i = 0; i < 8; i++) d[i] = dd;
  v128_t mask = wasm_i8x16_splat(15);
  v128_t three = wasm_i8x16_splat(3);
  v128_t bias = wasm_i8x16_splat(32);
  for (i32 half = 0; half < 2; half++) {
    const u8* ql = b + 64 * half;
    const u8* qh = b + 128 + 32 * half;
    const int8_t* sc = (const int8_t*)(b + 192 + 8 * half);
    i16* out = q + 128 * half;
    for (i32 h = 0; h < 2; h++) {  // l in [16h, 16h + 16)
      v128_t l0 = ld(ql + 16 * h), l1 = ld(ql + 32 + 16 * h), hb = ld(qh + 16 * h);
      for (i32 k = 0; k < 4; k++) {
        v128_t lo = k & 2 ? wasm_u8x16_shr(k & 1 ? l1 : l0, 4)
                          : wasm_v128_and(k & 1 ? l1 : l0, mask);
        v128_t hi = wasm_i8x16_shl(wasm_v128_and(wasm_u8x16_shr(hb, 2 * k), three), 4);
        v128_t v = wasm_i8x16_sub(wasm_v128_or(lo, hi), bias);
        put_i8_scaled(out + 32 * k + 16 * h, v, sc[h + 2 * k]);
      }
    }
  }
}

typedef void (*unpack_fn)(const u8* b, i16* q, float* d, float* m);

typedef struct {
  unpack_fn unpack;
  i32 block;   // weights per block
  i32 bytes;   // bytes per block
  i32 offset;  // whether blocks have offsets (m)
} format_t;

static const format_t FORMATS[WF_GGML_END - WF_GGML_FIRST] = {
    [WF_Q4_0 - WF_GGML_FIRST] = {unpack_q4_0, 32, 18, 0},
    [WF_Q4_1 - WF_GGML_FIRST] = {unpack_q4_1, 32, 20, 1},
    [WF_Q5_0 - WF_GGML_FIRST] = {unpack_q5_0, 32, 22, 0},
    [WF_Q5_1 - WF_GGML_FIRST] = {unpack_q5_1, 32, 24, 1},
    [WF_Q8_0 - WF_GGML_FIRST] = {unpack_q8_0, 32, 34, 0},
    [WF_Q2_K - WF_GGML_FIRST] = {unpack_q2_k, 256, 84, 1},
    [WF_Q3_K - WF_GGML_FIRST] = {unpack_q3_k, 256, 110, 0},
    [WF_Q4_K - WF_GGML_FIRST] = {unpack_q4_k, 256, 144, 1},
    [WF_Q5_K - WF_GGML_FIRST] = {unpack_q5_k, 256, 176, 1},
    [WF_Q6_K - WF_GGML_FIRST] = {unpack_q6_k, 256, 210, 0},
    [WF_IQ4_NL - WF_GGML_FIRST] = {unpack_iq4_nl, 32, 18, 0},
};

// Row `r` (k weights) to codes, per-32 scales and per-16 offsets.
static void unpack_row(const format_t* f, const u8* w, i32 k, i32 r, i16* q, float* d, float* m) {
  i32 nb = k / f->block;
  const u8* p = w + (long)r * nb * f->bytes;
  for (i32 b = 0; b < nb; b++, p += f->bytes)
    f->unpack(p, q + b * f->block, d + b * (f->block / 32), m + b * (f->block / 16));
}

void ggml_decode_row(const u8* w, i32 fmt, i32 k, i32 r, float* out) {
  const format_t* f = &FORMATS[fmt - WF_GGML_FIRST];
  // One block at a time through a small stack buffer: embedding rows can be long.
  i16 q[256];
  float d[8], m[16];
  i32 nb = k / f->block;
  const u8* p = w + (long)r * nb * f->bytes;
  for (i32 b = 0; b < nb; b++, p += f->bytes) {
    for (i32 i = 0; i < 16; i++) m[i] = 0.0f;
    f->unpack(p, q, d, m);
    float* o = out + b * f->block;
    for (i32 i = 0; i < f->block; i++) o[i] = d[i >> 5] * (float)q[i] + m[i >> 4];
  }
}

// x[k] to int16 per block of 32: xq = round(x / s), s = max|x| / 32767, with xs[b] = s and
// xb[g] = s · Σ xq over the 16 weights of group g (what the offsets multiply).
static void quantize_x(const float* x, i32 k, i16* xq, float* xs, float* xb) {
  v128_t ones = wasm_i16x8_splat(1);
  for (i32 b = 0; b < k; b += 32) {
    v128_t mx = wasm_f32x4_splat(0);
    for (i32 i = b; i < b + 32; i += 4) mx = wasm_f32x4_max(mx, wasm_f32x4_abs(ld(x + i)));
    float mv = wasm_f32x4_extract_lane(mx, 0);
    float m1 = wasm_f32x4_extract_lane(mx, 1);
    float m2 = wasm_f32x4_extract_lane(mx, 2);
    float m3 = wasm_f32x4_extract_lane(mx, 3);
    if (m1 > mv) mv = m1;
    if (m2 > mv) mv = m2;
    if (m3 > mv) mv = m3;
    float s = mv / 32767.0f;
    v128_t inv = wasm_f32x4_splat(s > 0.0f ? 1.0f / s : 0.0f);
    for (i32 i = b; i < b + 32; i += 8) {
      v128_t q0 = wasm_i32x4_trunc_sat_f32x4(wasm_f32x4_nearest(wasm_f32x4_mul(ld(x + i), inv)));
      v128_t q1 =
          wasm_i32x4_trunc_sat_f32x4(wasm_f32x4_nearest(wasm_f32x4_mul(ld(x + i + 4), inv)));
      wasm_v128_store(xq + i, wasm_i16x8_narrow_i32x4(q0, q1));
    }
    xs[b / 32] = s;
    for (i32 g = 0; g < 2; g++) {
      const i16* p = xq + b + 16 * g;
      v128_t t =
          wasm_i32x4_add(wasm_i32x4_dot_i16x8(ld(p), ones), wasm_i32x4_dot_i16x8(ld(p + 8), ones));
      i32 sum = wasm_i32x4_extract_lane(t, 0) + wasm_i32x4_extract_lane(t, 1) +
                wasm_i32x4_extract_lane(t, 2) + wasm_i32x4_extract_lane(t, 3);
      xb[b / 16 + g] = s * (float)sum;
    }
  }
}

INLINE v128_t fmadd_i(v128_t acc, v128_t isum, float scale) {
  v128_t v = wasm_f32x4_convert_i32x4(isum);
  return wasm_f32x4_add(acc, wasm_f32x4_mul(v, wasm_f32x4_splat(scale)));
}

// An unpacked weight row: int16 codes, per-32 scales, per-16 offsets.
typedef struct {
  i16* q;
  float* d;
  float* m;
} row_t;

// A quantized x row: int16 values, per-32 scales, per-16 scaled sums.
typedef struct {
  const i16* q;
  const float* s;
  const float* b;
} xrow_t;

INLINE v128_t idot8(const i16* w, const i16* x) { return wasm_i32x4_dot_i16x8(ld(w), ld(x)); }

// One unpacked weight row against one quantized x row (a lone token).
static float dot_1x1(row_t w, i32 offsets, xrow_t x, i32 k) {
  v128_t acc = wasm_f32x4_splat(0);
  for (i32 b = 0; b < k / 32; b++) {
    const i16* p = w.q + 32 * b;
    const i16* u = x.q + 32 * b;
    v128_t s = wasm_i32x4_add(idot8(p, u), idot8(p + 8, u + 8));
    s = wasm_i32x4_add(s, wasm_i32x4_add(idot8(p + 16, u + 16), idot8(p + 24, u + 24)));
    acc = fmadd_i(acc, s, w.d[b] * x.s[b]);
  }
  float r = hsum(acc);
  if (offsets) {
    v128_t o = wasm_f32x4_splat(0);
    i32 g = 0, groups = k / 16;
    for (; g + 4 <= groups; g += 4) o = wasm_f32x4_add(o, wasm_f32x4_mul(ld(w.m + g), ld(x.b + g)));
    r += hsum(o);
    for (; g < groups; g++) r += w.m[g] * x.b[g];
  }
  return r;
}

// Two unpacked weight rows against two quantized x rows: o[2r + t] = W[r] · x[t]. Each load
// serves two dot products.
static void dot_2x2(row_t w0, row_t w1, i32 offsets, xrow_t x0, xrow_t x1, i32 k, float* o) {
  v128_t z = wasm_f32x4_splat(0);
  v128_t a00 = z, a01 = z, a10 = z, a11 = z;
  for (i32 b = 0; b < k / 32; b++) {
    const i16* p = w0.q + 32 * b;
    const i16* q = w1.q + 32 * b;
    const i16* u = x0.q + 32 * b;
    const i16* v = x1.q + 32 * b;
    v128_t s00 = wasm_i32x4_splat(0), s01 = s00, s10 = s00, s11 = s00;
    for (i32 i = 0; i < 32; i += 8) {
      s00 = wasm_i32x4_add(s00, idot8(p + i, u + i));
      s01 = wasm_i32x4_add(s01, idot8(p + i, v + i));
      s10 = wasm_i32x4_add(s10, idot8(q + i, u + i));
      s11 = wasm_i32x4_add(s11, idot8(q + i, v + i));
    }
    a00 = fmadd_i(a00, s00, w0.d[b] * x0.s[b]);
    a01 = fmadd_i(a01, s01, w0.d[b] * x1.s[b]);
    a10 = fmadd_i(a10, s10, w1.d[b] * x0.s[b]);
    a11 = fmadd_i(a11, s11, w1.d[b] * x1.s[b]);
  }
  o[0] = hsum(a00);
  o[1] = hsum(a01);
  o[2] = hsum(a10);
  o[3] = hsum(a11);
  if (offsets) {
    v128_t m00 = z, m01 = z, m10 = z, m11 = z;
    i32 g = 0, groups = k / 16;
    for (; g + 4 <= groups; g += 4) {
      v128_t p = ld(w0.m + g), q = ld(w1.m + g), u = ld(x0.b + g), v = ld(x1.b + g);
      m00 = wasm_f32x4_add(m00, wasm_f32x4_mul(p, u));
      m01 = wasm_f32x4_add(m01, wasm_f32x4_mul(p, v));
      m10 = wasm_f32x4_add(m10, wasm_f32x4_mul(q, u));
      m11 = wasm_f32x4_add(m11, wasm_f32x4_mul(q, v));
    }
    o[0] += hsum(m00);
    o[1] += hsum(m01);
    o[2] += hsum(m10);
    o[3] += hsum(m11);
    for (; g < groups; g++) {
      o[0] += w0.m[g] * x0.b[g];
      o[1] += w0.m[g] * x1.b[g];
      o[2] += w1.m[g] * x0.b[g];
      o[3] += w1.m[g] * x1.b[g];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Decode (one token): the commonest formats of k-quant files multiply two rows at a time
// straight from their blocks, codes widened in registers (no unpacked row in memory), so the
// x loads serve both rows.

// i32x4 partial sums of 16 codes (a u8x16 or i8x16) times 16 int16 x values.
INLINE v128_t dot16_u8(v128_t a, const i16* x) {
  return wasm_i32x4_add(wasm_i32x4_dot_i16x8(wasm_u16x8_extend_low_u8x16(a), ld(x)),
                        wasm_i32x4_dot_i16x8(wasm_u16x8_extend_high_u8x16(a), ld(x + 8)));
}

INLINE v128_t dot16_i8(v128_t a, const i16* x) {
  return wasm_i32x4_add(wasm_i32x4_dot_i16x8(wasm_i16x8_extend_low_i8x16(a), ld(x)),
                        wasm_i32x4_dot_i16x8(wasm_i16x8_extend_high_i8x16(a), ld(x + 8)));
}


typedef void (*dot2_fn)(const u8* r0, const u8* r1, i32 nb, const i16* xq, const float* xs,
                        const float* xb, float* o);

static void dot2_q8_0(const u8* r0, const u8* r1, i32 nb, const i16* xq, const float* xs,
                      const float* xb, float* o) {
  (void)xb;
  v128_t a0 = wasm_f32x4_splat(0), a1 = a0;
  for (i32 b = 0; b < nb; b++, r0 += 34, r1 += 34) {
    const i16* x = xq + 32 * b;
    v128_t s0 = wasm_i32x4_add(dot16_i8(ld(r0 + 2), x), dot16_i8(ld(r0 + 18), x + 16));
    v128_t s1 = wasm_i32x4_add(dot16_i8(ld(r1 + 2), x), dot16_i8(ld(r1 + 18), x + 16));
    a0 = fmadd_i(a0, s0, f16_at(r0) * xs[b]);
    a1 = fmadd_i(a1, s1, f16_at(r1) * xs[b]);
  }
  o[0] = hsum(a0);
  o[1] = hsum(a1);
}

INLINE v128_t q4_0_dot(const u8* r, const i16* x) {
  v128_t v = ld(r + 2);
  v128_t eight = wasm_i8x16_splat(8);
  v128_t lo = wasm_i8x16_sub(wasm_v128_and(v, wasm_i8x16_splat(15)), eight);
  v128_t hi = wasm_i8x16_sub(wasm_u8x16_shr(v, 4), eight);
  return wasm_i32x4_add(dot16_i8(lo, x), dot16_i8(hi, x + 16));
}

static void dot2_q4_0(const u8* r0, const u8* r1, i32 nb, const i16* xq, const float* xs,
                      const float* xb, float* o) {
  (void)xb;
  v128_t a0 = wasm_f32x4_splat(0), a1 = a0;
  for (i32 b = 0; b < nb; b++, r0 += 18, r1 += 18) {
    const i16* x = xq + 32 * b;
    a0 = fmadd_i(a0, q4_0_dot(r0, x), f16_at(r0) * xs[b]);
    a1 = fmadd_i(a1, q4_0_dot(r1, x), f16_at(r1) * xs[b]);
  }
  o[0] = hsum(a0);
  o[1] = hsum(a1);
}

INLINE v128_t u16_lo_f32(v128_t v) {
  return wasm_f32x4_convert_i32x4(wasm_u32x4_extend_low_u16x8(v));
}

INLINE v128_t u16_hi_f32(v128_t v) {
  return wasm_f32x4_convert_i32x4(wasm_u32x4_extend_high_u16x8(v));
}

// One Q4_K / Q5_K super-block of one row: the scaled sub-block sums into acc, returns the
// minimums' term (dmin · Σ m_s · Σx over sub-block s). The twelve scale bytes become eight
// scales and eight minimums with u32 masks, as llama.cpp unpacks them, and their products with
// d and x's scales are taken four at a time: per-sub-block scalar work costs as much as the
// vector work otherwise.
INLINE float qk_k_block(const u8* blk, const u8* qs, const u8* qh, const i16* x, const float* xs,
                        const float* xb, v128_t* acc) {
  float d = f16_at(blk);
  float dmin = f16_at(blk + 2);
  v128_t raw = ld(blk + 4);
  u32 u0 = (u32)wasm_i32x4_extract_lane(raw, 0);
  u32 u1 = (u32)wasm_i32x4_extract_lane(raw, 1);
  u32 u2 = (u32)wasm_i32x4_extract_lane(raw, 2);
  // bytes: scales 0-3, scales 4-7, mins 0-3, mins 4-7 (get_scale_min_k4 for every j at once)
  v128_t sm = wasm_i32x4_make(
      (i32)(u0 & 0x3f3f3f3fu), (i32)((u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4)),
      (i32)(u1 & 0x3f3f3f3fu), (i32)(((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4)));
  v128_t sc16 = wasm_u16x8_extend_low_u8x16(sm);
  v128_t mn16 = wasm_u16x8_extend_high_u8x16(sm);
  v128_t dv = wasm_f32x4_splat(d);
  float ds[8];
  wasm_v128_store(ds, wasm_f32x4_mul(wasm_f32x4_mul(u16_lo_f32(sc16), dv), ld(xs)));
  wasm_v128_store(ds + 4, wasm_f32x4_mul(wasm_f32x4_mul(u16_hi_f32(sc16), dv), ld(xs + 4)));
  // Σx per sub-block: xb's groups of 16 added in pairs.
  v128_t g0 = ld(xb), g1 = ld(xb + 4), g2 = ld(xb + 8), g3 = ld(xb + 12);
  v128_t x03 = wasm_f32x4_add(wasm_i32x4_shuffle(g0, g1, 0, 2, 4, 6),
                              wasm_i32x4_shuffle(g0, g1, 1, 3, 5, 7));
  v128_t x47 = wasm_f32x4_add(wasm_i32x4_shuffle(g2, g3, 0, 2, 4, 6),
                              wasm_i32x4_shuffle(g2, g3, 1, 3, 5, 7));
  v128_t mins = wasm_f32x4_add(wasm_f32x4_mul(u16_lo_f32(mn16), x03),
                               wasm_f32x4_mul(u16_hi_f32(mn16), x47));
  v128_t mask = wasm_i8x16_splat(15);
  v128_t sixteen = wasm_i8x16_splat(16);
  v128_t zero = wasm_i8x16_splat(0);
  v128_t h0 = zero, h1 = zero;
  if (qh) {
    h0 = ld(qh);
    h1 = ld(qh + 16);
  }
  v128_t a = *acc;
  for (i32 j = 0; j < 4; j++) {
    v128_t va = ld(qs + 32 * j), vc = ld(qs + 32 * j + 16);
    v128_t la = wasm_v128_and(va, mask), lc = wasm_v128_and(vc, mask);
    v128_t ha = wasm_u8x16_shr(va, 4), hc = wasm_u8x16_shr(vc, 4);
    if (qh) {
      v128_t b0 = wasm_i8x16_splat((int8_t)(1 << (2 * j)));
      v128_t b1 = wasm_i8x16_splat((int8_t)(2 << (2 * j)));
      la = wasm_v128_or(la, wasm_v128_and(wasm_i8x16_ne(wasm_v128_and(h0, b0), zero), sixteen));
      lc = wasm_v128_or(lc, wasm_v128_and(wasm_i8x16_ne(wasm_v128_and(h1, b0), zero), sixteen));
      ha = wasm_v128_or(ha, wasm_v128_and(wasm_i8x16_ne(wasm_v128_and(h0, b1), zero), sixteen));
      hc = wasm_v128_or(hc, wasm_v128_and(wasm_i8x16_ne(wasm_v128_and(h1, b1), zero), sixteen));
    }
    const i16* xl = x + 64 * j;
    a = fmadd_i(a, wasm_i32x4_add(dot16_u8(la, xl), dot16_u8(lc, xl + 16)), ds[2 * j]);
    a = fmadd_i(a, wasm_i32x4_add(dot16_u8(ha, xl + 32), dot16_u8(hc, xl + 48)), ds[2 * j + 1]);
  }
  *acc = a;
  return dmin * hsum(mins);
}

static void dot2_q4_k(const u8* r0, const u8* r1, i32 nb, const i16* xq, const float* xs,
                      const float* xb, float* o) {
  v128_t a0 = wasm_f32x4_splat(0), a1 = a0;
  float m0 = 0.0f, m1 = 0.0f;
  for (i32 b = 0; b < nb; b++, r0 += 144, r1 += 144) {
    const i16* x = xq + 256 * b;
    m0 += qk_k_block(r0, r0 + 16, 0, x, xs + 8 * b, xb + 16 * b, &a0);
    m1 += qk_k_block(r1, r1 + 16, 0, x, xs + 8 * b, xb + 16 * b, &a1);
  }
  o[0] = hsum(a0) - m0;
  o[1] = hsum(a1) - m1;
}

static void dot2_q5_k(const u8* r0, const u8* r1, i32 nb, const i16* xq, const float* xs,
                      const float* xb, float* o) {
  v128_t a0 = wasm_f32x4_splat(0), a1 = a0;
  float m0 = 0.0f, m1 = 0.0f;
  for (i32 b = 0; b < nb; b++, r0 += 176, r1 += 176) {
    const i16* x = xq + 256 * b;
    m0 += qk_k_block(r0, r0 + 48, r0 + 16, x, xs + 8 * b, xb + 16 * b, &a0);
    m1 += qk_k_block(r1, r1 + 48, r1 + 16, x, xs + 8 * b, xb + 16 * b, &a1);
  }
  o[0] = hsum(a0) - m0;
  o[1] = hsum(a1) - m1;
}

// Bits 2k, 2k + 1 of each qh byte moved to bits 4, 5: one constant shift and a mask (k must be
// a constant, as in shr_2j).
INLINE v128_t q6_hi(v128_t hb, i32 k) {
  v128_t m = wasm_i8x16_splat(0x30);
  if (k == 0) return wasm_v128_and(wasm_i8x16_shl(hb, 4), m);
  if (k == 1) return wasm_v128_and(wasm_i8x16_shl(hb, 2), m);
  if (k == 2) return wasm_v128_and(hb, m);
  return wasm_v128_and(wasm_u8x16_shr(hb, 2), m);
}

// Quarter k (32 weights) of a Q6_K half: codes from nibble k >> 1 of lo0/lo1 and bits 2k of
// hb0/hb1, each 16 times its int8 scale in i32 (|sum| <= 4 · 32 · 32767 per lane, times 128,
// two of them: below 2^31), then one float multiply-add.
INLINE v128_t q6_quarter(v128_t acc, v128_t lo0, v128_t lo1, v128_t hb0, v128_t hb1, i32 k,
                         const int8_t* sc, const i16* x, float scale) {
  v128_t bias = wasm_i8x16_splat(32);
  if (k & 2) {
    lo0 = wasm_u8x16_shr(lo0, 4);
    lo1 = wasm_u8x16_shr(lo1, 4);
  } else {
    lo0 = wasm_v128_and(lo0, wasm_i8x16_splat(15));
    lo1 = wasm_v128_and(lo1, wasm_i8x16_splat(15));
  }
  v128_t q0 = wasm_i8x16_sub(wasm_v128_or(lo0, q6_hi(hb0, k)), bias);
  v128_t q1 = wasm_i8x16_sub(wasm_v128_or(lo1, q6_hi(hb1, k)), bias);
  v128_t s0 = wasm_i32x4_mul(dot16_i8(q0, x), wasm_i32x4_splat(sc[2 * k]));
  v128_t s1 = wasm_i32x4_mul(dot16_i8(q1, x + 16), wasm_i32x4_splat(sc[2 * k + 1]));
  return fmadd_i(acc, wasm_i32x4_add(s0, s1), scale);
}

// One Q6_K super-block of one row into acc.
INLINE void q6_k_block(const u8* blk, const i16* x, const float* xs, v128_t* acc) {
  float d = f16_at(blk + 208);
  for (i32 half = 0; half < 2; half++) {
    const u8* ql = blk + 64 * half;
    const u8* qh = blk + 128 + 32 * half;
    const int8_t* sc = (const int8_t*)(blk + 192 + 8 * half);
    const i16* xh = x + 128 * half;
    const float* s = xs + 4 * half;
    v128_t l00 = ld(ql), l01 = ld(ql + 16), l10 = ld(ql + 32), l11 = ld(ql + 48);
    v128_t hb0 = ld(qh), hb1 = ld(qh + 16);
    v128_t a = *acc;
    a = q6_quarter(a, l00, l01, hb0, hb1, 0, sc, xh, d * s[0]);
    a = q6_quarter(a, l10, l11, hb0, hb1, 1, sc, xh + 32, d * s[1]);
    a = q6_quarter(a, l00, l01, hb0, hb1, 2, sc, xh + 64, d * s[2]);
    a = q6_quarter(a, l10, l11, hb0, hb1, 3, sc, xh + 96, d * s[3]);
    *acc = a;
  }
}

static void dot2_q6_k(const u8* r0, const u8* r1, i32 nb, const i16* xq, const float* xs,
                      const float* xb, float* o) {
  (void)xb;
  v128_t a0 = wasm_f32x4_splat(0), a1 = a0;
  for (i32 b = 0; b < nb; b++, r0 += 210, r1 += 210) {
    q6_k_block(r0, xq + 256 * b, xs + 8 * b, &a0);
    q6_k_block(r1, xq + 256 * b, xs + 8 * b, &a1);
  }
  o[0] = hsum(a0);
  o[1] = hsum(a1);
}

static const dot2_fn DOT2[WF_GGML_END - WF_GGML_FIRST] = {
    [WF_Q4_0 - WF_GGML_FIRST] = dot2_q4_0, [WF_Q8_0 - WF_GGML_FIRST] = dot2_q8_0,
    [WF_Q4_K - WF_GGML_FIRST] = dot2_q4_k, [WF_Q5_K - WF_GGML_FIRST] = dot2_q5_k,
    [WF_Q6_K - WF_GGML_FIRST] = dot2_q6_k,
};

// Decode through DOT2: rows j, j + 1 at a time (a last odd row paired with itself).
static void matvec_fused(dot2_fn dot2, const format_t* f, const u8* w, i32 k, i32 n, i32 lo,
                         i32 hi, const i16* xq, const float* xs, const float* xb, float* y, i32 ep,
                         const float* bias) {
  i32 nb = k / f->block;
  long rowBytes = (long)nb * f->bytes;
  float o[2];
  for (i32 j = lo; j < hi; j += 2) {
    const u8* r0 = w + j * rowBytes;
    dot2(r0, j + 1 < hi ? r0 + rowBytes : r0, nb, xq, xs, xb, o);
    if (ep == 2) {
      epilogue(y, n, ep, bias, 0, j, o[0], o[1]);
    } else {
      epilogue(y, n, ep, bias, 0, j, o[0], 0.0f);
      if (j + 1 < hi) epilogue(y, n, ep, bias, 0, j + 1, o[1], 0.0f);
    }
  }
}

void ggml_matmul(const float* x, i32 m, i32 k, const u8* w, i32 n, i32 fmt, i32 lo, i32 hi,
                 float* scratch, float* y, i32 ep, const float* bias) {
  if (lo >= hi) return;
  const format_t* f = &FORMATS[fmt - WF_GGML_FIRST];
  // Scratch (floats): xq TB·k/2, xs TB·k/32, xb TB·k/16, then two unpacked rows.
  i16* xq = (i16*)scratch;
  float* xs = scratch + TB * k / 2;
  float* xb = xs + TB * k / 32;
  // Two unpacked rows after the token block: wq k/2, wd k/32, wm k/16 floats each.
  row_t rows[2];
  float* r = xb + TB * k / 16;
  for (i32 i = 0; i < 2; i++) {
    rows[i].q = (i16*)r;
    rows[i].d = r + k / 2;
    rows[i].m = rows[i].d + k / 32;
    r = rows[i].m + k / 16;
  }
  dot2_fn dot2 = DOT2[fmt - WF_GGML_FIRST];
  if (m == 1 && dot2) {
    quantize_x(x, k, xq, xs, xb);
    matvec_fused(dot2, f, w, k, n, lo, hi, xq, xs, xb, y, ep, bias);
    return;
  }
  for (i32 t0 = 0; t0 < m; t0 += TB) {
    i32 nt = m - t0 < TB ? m - t0 : TB;
    // Every thread rounds the token block itself: k · nt work against its rows' k · nt · rows.
    for (i32 t = 0; t < nt; t++)
      quantize_x(x + (long)(t0 + t) * k, k, xq + t * k, xs + t * (k / 32), xb + t * (k / 16));
    // Rows in pairs (for SwiGLU, gate and up), tokens in pairs; an odd last one is paired with
    // itself and its twin result dropped.
    for (i32 j = lo; j < hi; j += 2) {
      i32 two = j + 1 < hi;
      unpack_row(f, w, k, j, rows[0].q, rows[0].d, rows[0].m);
      if (two) unpack_row(f, w, k, j + 1, rows[1].q, rows[1].d, rows[1].m);
      row_t r1 = two ? rows[1] : rows[0];
      for (i32 t = 0; t < nt; t += 2) {
        i32 u = t + 1 < nt ? t + 1 : t;
        xrow_t x0 = {xq + t * k, xs + t * (k / 32), xb + t * (k / 16)};
        xrow_t x1 = {xq + u * k, xs + u * (k / 32), xb + u * (k / 16)};
        float o[4];
        if (u > t) {
          dot_2x2(rows[0], r1, f->offset, x0, x1, k, o);
        } else {
          o[0] = dot_1x1(rows[0], f->offset, x0, k);
          o[2] = two ? dot_1x1(r1, f->offset, x0, k) : o[0];
        }
        for (i32 c = 0; c <= u - t; c++) {
          if (ep == 2) {
            epilogue(y, n, ep, bias, t0 + t + c, j, o[c], o[2 + c]);
          } else {
            epilogue(y, n, ep, bias, t0 + t + c, j, o[c], 0.0f);
            if (two) epilogue(y, n, ep, bias, t0 + t + c, j + 1, o[2 + c], 0.0f);
          }
        }
      }
    }
  }
}
