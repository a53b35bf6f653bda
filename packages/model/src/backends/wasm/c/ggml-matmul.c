// Matrix products straight from GGML blocks (a GGUF file's Q8_0, Q4_K, Q6_K, ... bytes, as
// loaded), so a quantized model costs its file's bytes in memory and per decode step.
//
// The approach is llama.cpp's: activations are quantized once per step and row to 8 bits per
// block of 32 (int8-dot.h; the op OP_QUANTIZE does it for all threads, or ggml_matmul itself
// when given none), and multiplied by the weights' codes in integers (relaxed SIMD's int8 dot
// in the relaxed build, pairs of i16 dot products in the plain one: the same lanes, so the same
// bits), one float multiply-add per 32 weights. The weights' offsets (the `_1` and K formats'
// minimums, and the bias of unsigned codes: Q4_0's -8, Q6_K's -32, ...) meet the activations'
// per-16 sums instead of each activation.
//
// Decode (one token) of Q8_0, Q4_0, Q4_K, Q5_K and Q6_K multiplies two rows at a time straight
// from their blocks (matvec_fused). Every other case unpacks each weight row once per block of
// tokens into codes (u8, or i8 for the signed formats), per-16 integer sub-scales, per-32
// scales and per-16 offsets, and multiplies 2 rows × 2 tokens per inner loop (tile_2x2).

#include "ggml-matmul.h"

#include "common.h"
#include "int8-dot.h"
#include "matmul-epilogue.h"

typedef uint8_t u8;
typedef int8_t i8;

// Token rows per block: weight rows are unpacked once per block of this many tokens.
#define TB 64
// Token rows the local quantization (no OP_QUANTIZE rows given) takes at a time.
#define TB_LOCAL 12

// A block's f16 scale at p, without branches: its exponent and mantissa shifted into an f32's
// place read 2^112 too small (subnormals included), fixed by one multiply (common.h's
// half4_to_f32, one lane). Exact for every finite half; scales have no infinities or NaNs.
INLINE float f16_at(const u8* p) {
  u32 h = (u32)p[0] | ((u32)p[1] << 8);
  return bits_f32(((h & 0x8000u) << 16) | ((h & 0x7fffu) << 13)) * 5.192296858534828e+33f;
}

INLINE u32 u32_at(const u8* p) {
  return (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24);
}

// ---------------------------------------------------------------------------------------------
// Block unpackers: one block to codes c[blockSize] (unsigned in [0, 63], or for the signed
// formats in [-127, 127]), integer sub-scales sc[blockSize / 16], scales d[blockSize / 32] and
// offsets m[blockSize / 16], with weight i = d[i / 32] · sc[i / 16] · c[i] + m[i / 16]. Layouts
// as ggml-common.h (and @kvasir/quantizer's decoders, the reference the tests hold these to).

static void unpack_q8_0(const u8* b, u8* c, i8* sc, float* d, float* m) {
  sc[0] = sc[1] = 1;
  m[0] = m[1] = 0.0f;
  d[0] = f16_at(b);
  wasm_v128_store(c, ld(b + 2));
  wasm_v128_store(c + 16, ld(b + 18));
}

// Q4_0 / IQ4_NL share a layout: byte j holds weight j (low nibble) and j + 16 (high).
static void unpack_q4_0(const u8* b, u8* c, i8* sc, float* d, float* m) {
  sc[0] = sc[1] = 1;
  d[0] = f16_at(b);
  m[0] = m[1] = -8.0f * d[0];
  v128_t v = ld(b + 2);
  wasm_v128_store(c, wasm_v128_and(v, wasm_i8x16_splat(15)));
  wasm_v128_store(c + 16, wasm_u8x16_shr(v, 4));
}

// ggml's kvalues_iq4nl, looked up sixteen at a time.
#define IQ4NL_TABLE \
  wasm_i8x16_const(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)

static void unpack_iq4_nl(const u8* b, u8* c, i8* sc, float* d, float* m) {
  sc[0] = sc[1] = 1;
  m[0] = m[1] = 0.0f;
  d[0] = f16_at(b);
  v128_t v = ld(b + 2);
  wasm_v128_store(c, wasm_i8x16_swizzle(IQ4NL_TABLE, wasm_v128_and(v, wasm_i8x16_splat(15))));
  wasm_v128_store(c + 16, wasm_i8x16_swizzle(IQ4NL_TABLE, wasm_u8x16_shr(v, 4)));
}

// ggml's kvalues_mxfp4 (E2M1 values doubled), the scale halved to match: 2^(e - 128), as
// ggml_e8m0_to_fp32_half (subnormal for e < 2).
#define MXFP4_TABLE wasm_i8x16_const(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12)

static void unpack_mxfp4(const u8* b, u8* c, i8* sc, float* d, float* m) {
  sc[0] = sc[1] = 1;
  m[0] = m[1] = 0.0f;
  u32 e = b[0];
  d[0] = bits_f32(e < 2 ? 0x00200000u << e : (e - 1) << 23);
  v128_t v = ld(b + 1);
  wasm_v128_store(c, wasm_i8x16_swizzle(MXFP4_TABLE, wasm_v128_and(v, wasm_i8x16_splat(15))));
  wasm_v128_store(c + 16, wasm_i8x16_swizzle(MXFP4_TABLE, wasm_u8x16_shr(v, 4)));
}

static void unpack_q4_1(const u8* b, u8* c, i8* sc, float* d, float* m) {
  sc[0] = sc[1] = 1;
  d[0] = f16_at(b);
  m[0] = m[1] = f16_at(b + 2);
  v128_t v = ld(b + 4);
  wasm_v128_store(c, wasm_v128_and(v, wasm_i8x16_splat(15)));
  wasm_v128_store(c + 16, wasm_u8x16_shr(v, 4));
}

// The fifth bits of a Q5 block: bit j of qh belongs to weight j.
static void unpack_q5(const u8* qs, u32 qh, u8* c) {
  for (i32 j = 0; j < 16; j++) {
    c[j] = (u8)((qs[j] & 15) | (((qh >> j) & 1) << 4));
    c[j + 16] = (u8)((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
  }
}

static void unpack_q5_0(const u8* b, u8* c, i8* sc, float* d, float* m) {
  sc[0] = sc[1] = 1;
  d[0] = f16_at(b);
  m[0] = m[1] = -16.0f * d[0];
  unpack_q5(b + 6, u32_at(b + 2), c);
}

static void unpack_q5_1(const u8* b, u8* c, i8* sc, float* d, float* m) {
  sc[0] = sc[1] = 1;
  d[0] = f16_at(b);
  m[0] = m[1] = f16_at(b + 2);
  unpack_q5(b + 8, u32_at(b + 4), c);
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
static void unpack_q2_k(const u8* b, u8* c, i8* sc, float* d, float* m) {
  float dd = f16_at(b + 80);
  float dmin = f16_at(b + 82);
  for (i32 i = 0; i < 8; i++) d[i] = dd;
  v128_t three = wasm_i8x16_splat(3);
  for (i32 half = 0; half < 2; half++) {
    for (i32 k = 0; k < 2; k++) {
      v128_t v = ld(b + 16 + 32 * half + 16 * k);
      for (i32 j = 0; j < 4; j++) {
        i32 g = 8 * half + 2 * j + k;
        u8 s = b[g];
        sc[g] = (i8)(s & 15);
        m[g] = -dmin * (float)(s >> 4);
        wasm_v128_store(c + 16 * g, wasm_v128_and(shr_2j(v, j), three));
      }
    }
  }
}

// Q3_K: as Q2_K's code layout, 4 added where the group's hmask bit is set (codes in [0, 7],
// weight (code - 4) · scale), signed 6-bit scales.
static void unpack_q3_k(const u8* b, u8* c, i8* sc, float* d, float* m) {
  float dd = f16_at(b + 108);
  for (i32 i = 0; i < 8; i++) d[i] = dd;
  const u8* s = b + 96;
  v128_t three = wasm_i8x16_splat(3);
  v128_t four = wasm_i8x16_splat(4);
  for (i32 half = 0; half < 2; half++) {
    for (i32 k = 0; k < 2; k++) {
      v128_t v = ld(b + 32 + 32 * half + 16 * k);
      v128_t hm = ld(b + 16 * k);
      for (i32 j = 0; j < 4; j++) {
        i32 g = 8 * half + 2 * j + k;
        i32 lo = (s[g & 7] >> (4 * (g >> 3))) & 15;
        i32 hi = (s[8 + (g & 3)] >> (2 * (g >> 2))) & 3;
        i32 scale = (lo | (hi << 4)) - 32;
        v128_t low = wasm_v128_and(shr_2j(v, j), three);
        v128_t bit = wasm_v128_and(hm, wasm_i8x16_splat((int8_t)(1 << (4 * half + j))));
        v128_t add = wasm_v128_and(wasm_i8x16_ne(bit, wasm_i8x16_splat(0)), four);
        sc[g] = (i8)scale;
        m[g] = -4.0f * dd * (float)scale;
        wasm_v128_store(c + 16 * g, wasm_v128_or(low, add));
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
static void unpack_qk_k(const u8* b, const u8* qs, const u8* qh, u8* c, i8* sc, float* d,
                        float* m) {
  float dd = f16_at(b);
  float dmin = f16_at(b + 2);
  v128_t mask = wasm_i8x16_splat(15);
  v128_t h0 = qh ? ld(qh) : wasm_i8x16_splat(0);
  v128_t h1 = qh ? ld(qh + 16) : h0;
  v128_t sixteen = wasm_i8x16_splat(16);
  for (i32 s = 0; s < 8; s++) {
    i32 scale, mn;
    scale_min_k4(s, b + 4, &scale, &mn);
    d[s] = dd * (float)scale;
    sc[2 * s] = sc[2 * s + 1] = 1;
    m[2 * s] = m[2 * s + 1] = -dmin * (float)mn;
    const u8* p = qs + 32 * (s >> 1);
    v128_t a = ld(p), e = ld(p + 16);
    if (s & 1) {
      a = wasm_u8x16_shr(a, 4);
      e = wasm_u8x16_shr(e, 4);
    } else {
      a = wasm_v128_and(a, mask);
      e = wasm_v128_and(e, mask);
    }
    if (qh) {
      v128_t bit = wasm_i8x16_splat((int8_t)(1 << s));
      v128_t zero = wasm_i8x16_splat(0);
      a = wasm_v128_or(a, wasm_v128_and(wasm_i8x16_ne(wasm_v128_and(h0, bit), zero), sixteen));
      e = wasm_v128_or(e, wasm_v128_and(wasm_i8x16_ne(wasm_v128_and(h1, bit), zero), sixteen));
    }
    wasm_v128_store(c + 32 * s, a);
    wasm_v128_store(c + 32 * s + 16, e);
  }
}

static void unpack_q4_k(const u8* b, u8* c, i8* sc, float* d, float* m) {
  unpack_qk_k(b, b + 16, 0, c, sc, d, m);
}

static void unpack_q5_k(const u8* b, u8* c, i8* sc, float* d, float* m) {
  unpack_qk_k(b, b + 48, b + 16, c, sc, d, m);
}

// Q6_K: per half of 128, quarter k (32 weights) takes nibble k >> 1 of ql[32·(k & 1) ..] and
// bits 2k of qh (codes in [0, 63], weight (code - 32) · scale); int8 scales per 16.
static void unpack_q6_k(const u8* b, u8* c, i8* sc, float* d, float* m) {
  float dd = f16_at(b + 208);
  for (i32 i = 0; i < 8; i++) d[i] = dd;
  v128_t mask = wasm_i8x16_splat(15);
  v128_t three = wasm_i8x16_splat(3);
  for (i32 half = 0; half < 2; half++) {
    const u8* ql = b + 64 * half;
    const u8* qh = b + 128 + 32 * half;
    const i8* s = (const i8*)(b + 192 + 8 * half);
    u8* out = c + 128 * half;
    for (i32 g = 0; g < 8; g++) {
      sc[8 * half + g] = s[g];
      m[8 * half + g] = -32.0f * dd * (float)s[g];
    }
    for (i32 h = 0; h < 2; h++) {  // l in [16h, 16h + 16)
      v128_t l0 = ld(ql + 16 * h), l1 = ld(ql + 32 + 16 * h), hb = ld(qh + 16 * h);
      for (i32 k = 0; k < 4; k++) {
        v128_t lo = k & 2 ? wasm_u8x16_shr(k & 1 ? l1 : l0, 4)
                          : wasm_v128_and(k & 1 ? l1 : l0, mask);
        v128_t hi = wasm_i8x16_shl(wasm_v128_and(wasm_u8x16_shr(hb, 2 * k), three), 4);
        wasm_v128_store(out + 32 * k + 16 * h, wasm_v128_or(lo, hi));
      }
    }
  }
}

typedef void (*unpack_fn)(const u8* b, u8* c, i8* sc, float* d, float* m);

// Kinds of codes: unsigned with every sub-scale 1, unsigned with per-16 sub-scales, signed.
enum { CODES_U = 0, CODES_U_SCALED = 1, CODES_S = 2 };

typedef struct {
  unpack_fn unpack;
  i32 block;   // weights per block
  i32 bytes;   // bytes per block
  i32 codes;   // CODES_*
  i32 offset;  // whether blocks have offsets (m)
} format_t;

static const format_t FORMATS[WF_GGML_END - WF_GGML_FIRST] = {
    [WF_Q4_0 - WF_GGML_FIRST] = {unpack_q4_0, 32, 18, CODES_U, 1},
    [WF_Q4_1 - WF_GGML_FIRST] = {unpack_q4_1, 32, 20, CODES_U, 1},
    [WF_Q5_0 - WF_GGML_FIRST] = {unpack_q5_0, 32, 22, CODES_U, 1},
    [WF_Q5_1 - WF_GGML_FIRST] = {unpack_q5_1, 32, 24, CODES_U, 1},
    [WF_Q8_0 - WF_GGML_FIRST] = {unpack_q8_0, 32, 34, CODES_S, 0},
    [WF_Q2_K - WF_GGML_FIRST] = {unpack_q2_k, 256, 84, CODES_U_SCALED, 1},
    [WF_Q3_K - WF_GGML_FIRST] = {unpack_q3_k, 256, 110, CODES_U_SCALED, 1},
    [WF_Q4_K - WF_GGML_FIRST] = {unpack_q4_k, 256, 144, CODES_U, 1},
    [WF_Q5_K - WF_GGML_FIRST] = {unpack_q5_k, 256, 176, CODES_U, 1},
    [WF_Q6_K - WF_GGML_FIRST] = {unpack_q6_k, 256, 210, CODES_U_SCALED, 1},
    [WF_IQ4_NL - WF_GGML_FIRST] = {unpack_iq4_nl, 32, 18, CODES_S, 0},
    [WF_MXFP4 - WF_GGML_FIRST] = {unpack_mxfp4, 32, 17, CODES_S, 0},
};

void ggml_decode_row(const u8* w, i32 fmt, i32 k, i32 r, float* out) {
  const format_t* f = &FORMATS[fmt - WF_GGML_FIRST];
  // One block at a time through a small stack buffer: embedding rows can be long.
  u8 c[256];
  i8 sc[16];
  float d[8], m[16];
  i32 nb = k / f->block;
  const u8* p = w + (long)r * nb * f->bytes;
  for (i32 b = 0; b < nb; b++, p += f->bytes) {
    f->unpack(p, c, sc, d, m);
    float* o = out + b * f->block;
    for (i32 i = 0; i < f->block; i++) {
      i32 code = f->codes == CODES_S ? (i32)(i8)c[i] : (i32)c[i];
      o[i] = d[i >> 5] * (float)(code * sc[i >> 4]) + m[i >> 4];
    }
  }
}

INLINE v128_t fmadd_i(v128_t acc, v128_t isum, float scale) {
  v128_t v = wasm_f32x4_convert_i32x4(isum);
  return wasm_f32x4_add(acc, wasm_f32x4_mul(v, wasm_f32x4_splat(scale)));
}

INLINE v128_t mul_i(v128_t isum, i32 s) { return wasm_i32x4_mul(isum, wasm_i32x4_splat(s)); }

// ---------------------------------------------------------------------------------------------
// Unpacked rows (the batched path and the formats without a fused decode kernel).

typedef struct {
  u8* c;
  i8* sc;
  float* d;
  float* m;
  int16_t* c16;
} row_t;

#ifdef KVASIR_RELAXED
#define C16_BYTES(k) 0
#else
// The plain build also keeps a CODES_U_SCALED row's codes times their sub-scales in int16 (at
// most 63 · 128 in magnitude), in int8-dot.h's order, so its dot is four i16 dot products per
// 32 weights and no integer multiply: i32x4.mul costs as much as two dots, and took Q6_K's
// batched matmul (the LM head of Q4_K_M files) to twice Q4_K's time. The lanes hold the same
// integers as the relaxed build's multiplies, so the bits stay the same.
#define C16_BYTES(k) (2 * (k))
#endif

// Bytes of one unpacked row of k weights: (plain) scaled int16 codes, codes, sub-scales,
// scales, offsets.
#define ROW_BYTES(k) (C16_BYTES(k) + (k) + (k) / 16 + (k) / 8 + (k) / 4)

INLINE row_t row_at(u8* base, i32 k) {
  u8* c = base + C16_BYTES(k);
  row_t r = {c, (i8*)(c + k), (float*)(c + k + k / 16), (float*)(c + k + k / 16 + k / 8),
             (int16_t*)base};
  return r;
}

static void unpack_row(const format_t* f, const u8* w, i32 k, i32 r, row_t out) {
  i32 nb = k / f->block;
  const u8* p = w + (long)r * nb * f->bytes;
  for (i32 b = 0; b < nb; b++, p += f->bytes)
    f->unpack(p, out.c + b * f->block, out.sc + b * (f->block / 16), out.d + b * (f->block / 32),
              out.m + b * (f->block / 16));
#ifndef KVASIR_RELAXED
  if (f->codes != CODES_U_SCALED) return;
  for (i32 g = 0; g < k / 16; g++) {
    v128_t v = ld(out.c + 16 * g);
    v128_t s = wasm_i16x8_splat(out.sc[g]);
    wasm_v128_store(out.c16 + 16 * g, wasm_i16x8_mul(wasm_v128_and(v, wasm_i16x8_splat(0xff)), s));
    wasm_v128_store(out.c16 + 16 * g + 8, wasm_i16x8_mul(wasm_u16x8_shr(v, 8), s));
  }
#endif
}

// The integer dot of block b (32 codes) of row w with activations at x (sub-scales applied for
// CODES_U_SCALED).
INLINE v128_t dot32(row_t w, i32 b, const xq_t* x, i32 codes) {
  const u8* c = w.c + 32 * b;
  v128_t z = wasm_i32x4_splat(0);
  if (codes == CODES_S) return dot_s(dot_s(z, ld(c), x), ld(c + 16), x + 16);
  if (codes == CODES_U) return dot_u(dot_u(z, ld(c), x), ld(c + 16), x + 16);
#ifdef KVASIR_RELAXED
  const i8* sc = w.sc + 2 * b;
  return wasm_i32x4_add(mul_i(dot_u(z, ld(c), x), sc[0]), mul_i(dot_u(z, ld(c + 16), x + 16), sc[1]));
#else
  const int16_t* p = w.c16 + 32 * b;
  v128_t a = wasm_i32x4_add(wasm_i32x4_dot_i16x8(ld(p), ld(x)), wasm_i32x4_dot_i16x8(ld(p + 8), ld(x + 8)));
  v128_t e = wasm_i32x4_add(wasm_i32x4_dot_i16x8(ld(p + 16), ld(x + 16)),
                            wasm_i32x4_dot_i16x8(ld(p + 24), ld(x + 24)));
  return wasm_i32x4_add(a, e);
#endif
}

// Σ offsets · activation sums (the offsets' part of a row's dot product).
INLINE float offsets_dot(const float* m, const float* xb, i32 k) {
  v128_t o = wasm_f32x4_splat(0);
  i32 g = 0, groups = k / 16;
  for (; g + 4 <= groups; g += 4) o = wasm_f32x4_add(o, wasm_f32x4_mul(ld(m + g), ld(xb + g)));
  float r = hsum(o);
  for (; g < groups; g++) r += m[g] * xb[g];
  return r;
}

// One unpacked row against one quantized activation row.
INLINE float dot_1x1(row_t w, i32 codes, i32 offsets, xrow_t x, i32 k) {
  v128_t acc = wasm_f32x4_splat(0);
  for (i32 b = 0; b < k / 32; b++)
    acc = fmadd_i(acc, dot32(w, b, x.q + 32 * b, codes), w.d[b] * x.s[b]);
  float r = hsum(acc);
  if (offsets) r += offsets_dot(w.m, x.b, k);
  return r;
}

// Two unpacked rows against two activation rows: o[2r + t] = W[r] · x[t]. Each load serves
// two dot products.
INLINE void tile_2x2(row_t w0, row_t w1, i32 codes, i32 offsets, xrow_t x0, xrow_t x1, i32 k,
                     float* o) {
  v128_t z = wasm_f32x4_splat(0);
  v128_t a00 = z, a01 = z, a10 = z, a11 = z;
  for (i32 b = 0; b < k / 32; b++) {
    const xq_t* u = x0.q + 32 * b;
    const xq_t* v = x1.q + 32 * b;
    a00 = fmadd_i(a00, dot32(w0, b, u, codes), w0.d[b] * x0.s[b]);
    a01 = fmadd_i(a01, dot32(w0, b, v, codes), w0.d[b] * x1.s[b]);
    a10 = fmadd_i(a10, dot32(w1, b, u, codes), w1.d[b] * x0.s[b]);
    a11 = fmadd_i(a11, dot32(w1, b, v, codes), w1.d[b] * x1.s[b]);
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
    float r00 = hsum(m00), r01 = hsum(m01), r10 = hsum(m10), r11 = hsum(m11);
    for (; g < groups; g++) {
      r00 += w0.m[g] * x0.b[g];
      r01 += w0.m[g] * x1.b[g];
      r10 += w1.m[g] * x0.b[g];
      r11 += w1.m[g] * x1.b[g];
    }
    o[0] += r00;
    o[1] += r01;
    o[2] += r10;
    o[3] += r11;
  }
}

// The tiles of one code kind (a constant, so each kind gets its own loop): rows j, j + 1 against
// token rows [t0, t0 + nt) of xq.
INLINE void tiles(row_t r0, row_t r1, i32 two, i32 codes, i32 offsets, const u8* xq, i32 k,
                  i32 t0, i32 nt, float* y, i32 n, i32 ep, const float* bias, i32 j, i32 tbase) {
  for (i32 t = 0; t < nt; t += 2) {
    i32 u = t + 1 < nt ? t + 1 : t;
    xrow_t x0 = xrow_at(xq, k, t0 + t);
    xrow_t x1 = xrow_at(xq, k, t0 + u);
    float o[4];
    if (u > t) {
      tile_2x2(r0, r1, codes, offsets, x0, x1, k, o);
    } else {
      o[0] = dot_1x1(r0, codes, offsets, x0, k);
      o[2] = two ? dot_1x1(r1, codes, offsets, x0, k) : o[0];
    }
    for (i32 c = 0; c <= u - t; c++) {
      i32 i = tbase + t + c;
      if (ep >= EP_SWIGLU) {
        epilogue_glu(y, n, ep, bias, i, j, o[c], o[2 + c]);
      } else {
        epilogue_store(y, n, ep, bias, i, j, o[c]);
        if (two) epilogue_store(y, n, ep, bias, i, j + 1, o[2 + c]);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Decode (one token): two rows at a time straight from their blocks, codes in registers (no
// unpacked row in memory), so the activation loads serve both rows.

typedef void (*dot2_fn)(const u8* r0, const u8* r1, i32 nb, xrow_t x, float* o);

static void dot2_q8_0(const u8* r0, const u8* r1, i32 nb, xrow_t x, float* o) {
  v128_t a0 = wasm_f32x4_splat(0), a1 = a0, z = wasm_i32x4_splat(0);
  for (i32 b = 0; b < nb; b++, r0 += 34, r1 += 34) {
    const xq_t* xb = x.q + 32 * b;
    v128_t s0 = dot_s(dot_s(z, ld(r0 + 2), xb), ld(r0 + 18), xb + 16);
    v128_t s1 = dot_s(dot_s(z, ld(r1 + 2), xb), ld(r1 + 18), xb + 16);
    a0 = fmadd_i(a0, s0, f16_at(r0) * x.s[b]);
    a1 = fmadd_i(a1, s1, f16_at(r1) * x.s[b]);
  }
  o[0] = hsum(a0);
  o[1] = hsum(a1);
}

INLINE v128_t q4_0_dot(const u8* r, const xq_t* x) {
  v128_t v = ld(r + 2);
  v128_t z = wasm_i32x4_splat(0);
  return dot_u(dot_u(z, wasm_v128_and(v, wasm_i8x16_splat(15)), x), wasm_u8x16_shr(v, 4), x + 16);
}

// Q4_0: Σ d · (c - 8) · x = d · (Σ c · x - 8 · Σ x), the second term from the activation sums.
static void dot2_q4_0(const u8* r0, const u8* r1, i32 nb, xrow_t x, float* o) {
  v128_t a0 = wasm_f32x4_splat(0), a1 = a0;
  float m0 = 0.0f, m1 = 0.0f;
  for (i32 b = 0; b < nb; b++, r0 += 18, r1 += 18) {
    const xq_t* xb = x.q + 32 * b;
    float d0 = f16_at(r0), d1 = f16_at(r1);
    float sx = x.b[2 * b] + x.b[2 * b + 1];
    a0 = fmadd_i(a0, q4_0_dot(r0, xb), d0 * x.s[b]);
    a1 = fmadd_i(a1, q4_0_dot(r1, xb), d1 * x.s[b]);
    m0 += d0 * sx;
    m1 += d1 * sx;
  }
  o[0] = hsum(a0) - 8.0f * m0;
  o[1] = hsum(a1) - 8.0f * m1;
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
INLINE float qk_k_block(const u8* blk, const u8* qs, const u8* qh, const xq_t* x, const float* xs,
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
  // Kept a loop in the plain build: clang unrolls it (two rows: 64 dots in one block), which
  // V8 runs at 0.7x the loop's speed (Q4_K decode, bench/ggml-kernels.ts against the loop).
#ifndef KVASIR_RELAXED
#pragma clang loop unroll(disable)
#endif
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
    const xq_t* xl = x + 64 * j;
    a = fmadd_i(a, dot_u(dot_u(zero, la, xl), lc, xl + 16), ds[2 * j]);
    a = fmadd_i(a, dot_u(dot_u(zero, ha, xl + 32), hc, xl + 48), ds[2 * j + 1]);
  }
  *acc = a;
  return dmin * hsum(mins);
}

static void dot2_q4_k(const u8* r0, const u8* r1, i32 nb, xrow_t x, float* o) {
  v128_t a0 = wasm_f32x4_splat(0), a1 = a0;
  float m0 = 0.0f, m1 = 0.0f;
  for (i32 b = 0; b < nb; b++, r0 += 144, r1 += 144) {
    const xq_t* xq = x.q + 256 * b;
    m0 += qk_k_block(r0, r0 + 16, 0, xq, x.s + 8 * b, x.b + 16 * b, &a0);
    m1 += qk_k_block(r1, r1 + 16, 0, xq, x.s + 8 * b, x.b + 16 * b, &a1);
  }
  o[0] = hsum(a0) - m0;
  o[1] = hsum(a1) - m1;
}

static void dot2_q5_k(const u8* r0, const u8* r1, i32 nb, xrow_t x, float* o) {
  v128_t a0 = wasm_f32x4_splat(0), a1 = a0;
  float m0 = 0.0f, m1 = 0.0f;
  for (i32 b = 0; b < nb; b++, r0 += 176, r1 += 176) {
    const xq_t* xq = x.q + 256 * b;
    m0 += qk_k_block(r0, r0 + 48, r0 + 16, xq, x.s + 8 * b, x.b + 16 * b, &a0);
    m1 += qk_k_block(r1, r1 + 48, r1 + 16, xq, x.s + 8 * b, x.b + 16 * b, &a1);
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

// Quarter k (32 weights) of a Q6_K half: codes (unsigned, in [0, 63]) from nibble k >> 1 of
// lo0/lo1 and bits 2k of hb0/hb1, each 16 times its int8 scale in i32 (|sum| <= 16 · 127 · 63
// per group, times 128, two of them: below 2^31), then one float multiply-add. The codes' -32
// is taken from the activation sums (q6_k_block).
INLINE v128_t q6_quarter(v128_t acc, v128_t lo0, v128_t lo1, v128_t hb0, v128_t hb1, i32 k,
                         const i8* sc, const xq_t* x, float scale) {
  if (k & 2) {
    lo0 = wasm_u8x16_shr(lo0, 4);
    lo1 = wasm_u8x16_shr(lo1, 4);
  } else {
    lo0 = wasm_v128_and(lo0, wasm_i8x16_splat(15));
    lo1 = wasm_v128_and(lo1, wasm_i8x16_splat(15));
  }
  v128_t z = wasm_i32x4_splat(0);
  v128_t q0 = wasm_v128_or(lo0, q6_hi(hb0, k));
  v128_t q1 = wasm_v128_or(lo1, q6_hi(hb1, k));
  v128_t s0 = mul_i(dot_u(z, q0, x), sc[2 * k]);
  v128_t s1 = mul_i(dot_u(z, q1, x + 16), sc[2 * k + 1]);
  return fmadd_i(acc, wasm_i32x4_add(s0, s1), scale);
}

// One Q6_K super-block of one row into acc, and d · scale_g · Σx_g (the codes' bias, to be
// taken 32 times) into bias: kept a vector across the row's blocks and summed once per row
// (a horizontal sum per block cost about as much as the block's dot products).
INLINE void q6_k_block(const u8* blk, const xq_t* x, const float* xs, const float* xb,
                       v128_t* acc, v128_t* bias) {
  float d = f16_at(blk + 208);
  v128_t sc = ld(blk + 192);
  v128_t s16lo = wasm_i16x8_extend_low_i8x16(sc), s16hi = wasm_i16x8_extend_high_i8x16(sc);
  v128_t bsum = wasm_f32x4_mul(wasm_f32x4_convert_i32x4(wasm_i32x4_extend_low_i16x8(s16lo)),
                               ld(xb));
  bsum = madd(bsum, wasm_f32x4_convert_i32x4(wasm_i32x4_extend_high_i16x8(s16lo)), ld(xb + 4));
  bsum = madd(bsum, wasm_f32x4_convert_i32x4(wasm_i32x4_extend_low_i16x8(s16hi)), ld(xb + 8));
  bsum = madd(bsum, wasm_f32x4_convert_i32x4(wasm_i32x4_extend_high_i16x8(s16hi)), ld(xb + 12));
  for (i32 half = 0; half < 2; half++) {
    const u8* ql = blk + 64 * half;
    const u8* qh = blk + 128 + 32 * half;
    const i8* s = (const i8*)(blk + 192 + 8 * half);
    const xq_t* xh = x + 128 * half;
    const float* xsh = xs + 4 * half;
    v128_t l00 = ld(ql), l01 = ld(ql + 16), l10 = ld(ql + 32), l11 = ld(ql + 48);
    v128_t hb0 = ld(qh), hb1 = ld(qh + 16);
    v128_t a = *acc;
    a = q6_quarter(a, l00, l01, hb0, hb1, 0, s, xh, d * xsh[0]);
    a = q6_quarter(a, l10, l11, hb0, hb1, 1, s, xh + 32, d * xsh[1]);
    a = q6_quarter(a, l00, l01, hb0, hb1, 2, s, xh + 64, d * xsh[2]);
    a = q6_quarter(a, l10, l11, hb0, hb1, 3, s, xh + 96, d * xsh[3]);
    *acc = a;
  }
  *bias = madd(*bias, bsum, wasm_f32x4_splat(d));
}

static void dot2_q6_k(const u8* r0, const u8* r1, i32 nb, xrow_t x, float* o) {
  v128_t a0 = wasm_f32x4_splat(0), a1 = a0, m0 = a0, m1 = a0;
  for (i32 b = 0; b < nb; b++, r0 += 210, r1 += 210) {
    q6_k_block(r0, x.q + 256 * b, x.s + 8 * b, x.b + 16 * b, &a0, &m0);
    q6_k_block(r1, x.q + 256 * b, x.s + 8 * b, x.b + 16 * b, &a1, &m1);
  }
  o[0] = hsum(a0) - 32.0f * hsum(m0);
  o[1] = hsum(a1) - 32.0f * hsum(m1);
}

static const dot2_fn DOT2[WF_GGML_END - WF_GGML_FIRST] = {
    [WF_Q4_0 - WF_GGML_FIRST] = dot2_q4_0, [WF_Q8_0 - WF_GGML_FIRST] = dot2_q8_0,
    [WF_Q4_K - WF_GGML_FIRST] = dot2_q4_k, [WF_Q5_K - WF_GGML_FIRST] = dot2_q5_k,
    [WF_Q6_K - WF_GGML_FIRST] = dot2_q6_k,
};

// Decode through DOT2: rows j, j + 1 at a time (a last odd row paired with itself).
static void matvec_fused(dot2_fn dot2, const format_t* f, const u8* w, i32 k, i32 n, i32 lo,
                         i32 hi, xrow_t x, float* y, i32 ep, const float* bias) {
  i32 nb = k / f->block;
  long rowBytes = (long)nb * f->bytes;
  float o[2];
  for (i32 j = lo; j < hi; j += 2) {
    const u8* r0 = w + j * rowBytes;
    dot2(r0, j + 1 < hi ? r0 + rowBytes : r0, nb, x, o);
    if (ep >= EP_SWIGLU) {
      epilogue_glu(y, n, ep, bias, 0, j, o[0], o[1]);
    } else {
      epilogue_store(y, n, ep, bias, 0, j, o[0]);
      if (j + 1 < hi) epilogue_store(y, n, ep, bias, 0, j + 1, o[1]);
    }
  }
}

void ggml_quantize_x(const float* x, i32 m, i32 k, u8* out, i32 tid, i32 nth) {
  i32 lo, hi;
  split(m * (k / 32), 1, tid, nth, &lo, &hi);
  quantize_blocks(x, k, lo, hi, out);
}

// Rows [lo, hi) of W against token rows [t0, t0 + nt) of the quantized activations xq (row
// t0 + t written as token row tbase + t).
static void matmul_rows(const format_t* f, const u8* w, i32 k, i32 n, i32 lo, i32 hi,
                        const u8* xq, i32 t0, i32 nt, i32 tbase, u8* rows, float* y, i32 ep,
                        const float* bias) {
  row_t r0 = row_at(rows, k);
  row_t r1 = row_at(rows + ROW_BYTES(k), k);
  for (i32 j = lo; j < hi; j += 2) {
    i32 two = j + 1 < hi;
    unpack_row(f, w, k, j, r0);
    if (two) unpack_row(f, w, k, j + 1, r1);
    row_t s = two ? r1 : r0;
    // One loop per code kind, the kind a constant in each.
    if (f->codes == CODES_S)
      tiles(r0, s, two, CODES_S, f->offset, xq, k, t0, nt, y, n, ep, bias, j, tbase);
    else if (f->codes == CODES_U)
      tiles(r0, s, two, CODES_U, f->offset, xq, k, t0, nt, y, n, ep, bias, j, tbase);
    else
      tiles(r0, s, two, CODES_U_SCALED, f->offset, xq, k, t0, nt, y, n, ep, bias, j, tbase);
  }
}

void ggml_matmul(const float* x, const u8* xq, i32 m, i32 k, const u8* w, i32 n, i32 fmt, i32 lo,
                 i32 hi, u8* scratch, float* y, i32 ep, const float* bias) {
  if (lo >= hi) return;
  const format_t* f = &FORMATS[fmt - WF_GGML_FIRST];
  // Scratch: two unpacked rows, then (without xq) a block of locally quantized token rows.
  u8* rows = scratch;
  u8* local = scratch + 2 * ROW_BYTES(k);
  dot2_fn dot2 = DOT2[fmt - WF_GGML_FIRST];
  if (xq) {
    if (m == 1 && dot2) {
      matvec_fused(dot2, f, w, k, n, lo, hi, xrow_at(xq, k, 0), y, ep, bias);
      return;
    }
    for (i32 t0 = 0; t0 < m; t0 += TB) {
      i32 nt = m - t0 < TB ? m - t0 : TB;
      matmul_rows(f, w, k, n, lo, hi, xq, t0, nt, t0, rows, y, ep, bias);
    }
    return;
  }
  // No shared quantized rows: this thread quantizes each block of tokens itself.
  for (i32 t0 = 0; t0 < m; t0 += TB_LOCAL) {
    i32 nt = m - t0 < TB_LOCAL ? m - t0 : TB_LOCAL;
    quantize_blocks(x + (long)t0 * k, k, 0, nt * (k / 32), local);
    if (m == 1 && dot2)
      matvec_fused(dot2, f, w, k, n, lo, hi, xrow_at(local, k, 0), y, ep, bias);
    else
      matmul_rows(f, w, k, n, lo, hi, local, 0, nt, t0, rows, y, ep, bias);
  }
}
