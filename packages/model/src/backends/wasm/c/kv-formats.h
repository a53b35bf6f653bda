// The KV cache formats of @kvasir/attention-kernels (src/kv-format/), in C: every row encoder
// gives the bits the TypeScript encodeRow gives (the same f32 operations in the same order; wasm
// has no fused multiply-add to change a rounding), and every row loader reads the cache in place.
//
// A slab is the `bs` K (or V) rows of one KV head in one block: `bs` rows of `rw` words, then the
// scale words of the scaled formats (int8 and fp8: one f32 per row; int4: an (f32 scale, f32
// zero point) pair per group of 32 elements per row).
//
// Loaders return a row in the form attention wants, which is not always the decoded row:
// - `factor`: the row's common scale (int8, fp8), applied once to a dot product instead of to
//   every element;
// - rotated formats (int8-h8, int4-g32-h32) return the rotated-domain values y (the row is
//   H·y / R, H the unnormalized Walsh–Hadamard transform of runs of R). Attention rotates the
//   query once (q·(H·y / R) = (H·q / R)·y) and its output once, not every key and value row.

#ifndef KVASIR_KV_FORMATS_H
#define KVASIR_KV_FORMATS_H

#include "common.h"

// The TypeScript twin is KvCode in wasm-program.ts.
enum {
  KV_F32 = 0,
  KV_F16 = 1,
  KV_INT8 = 2,
  KV_FP8_E4M3 = 3,
  KV_FP8_E5M2 = 4,
  KV_INT8_H8 = 5,
  KV_INT4 = 6,
  KV_INT4_H32 = 7,
};

// Largest head dim of the formats that encode through a row copy (int8-h8, int4-g32-h32).
#define KV_MAX_HEAD_DIM 512
#define INT4_GROUP 32

// Run length of a rotated format's Hadamard transform, 0 for the others.
INLINE i32 kv_rotation(i32 fmt) {
  return fmt == KV_INT8_H8 ? 8 : fmt == KV_INT4_H32 ? INT4_GROUP : 0;
}

// ---------------------------------------------------------------------------------------------
// Scalar codecs (@kvasir/quantizer's integer.ts, minifloat.ts, quantize.ts, hadamard.ts).

#define MIN_SCALE 1.17549435e-38f  // 2^-126

INLINE int is_nan_bits(u32 b) { return (b & 0x7fffffffu) > 0x7f800000u; }
INLINE int is_finite_f32(float x) { return (f32_bits(x) & 0x7f800000u) != 0x7f800000u; }

// rowAmax: NaN, infinities and magnitudes of 3e38 or more do not set the scale. The bound is
// compared in f64, as the TypeScript compares an f32 value with the double 3e38.
static inline float row_amax(const float* x, i32 d) {
  float m = 0.0f;
  for (i32 i = 0; i < d; i++) {
    float a = __builtin_fabsf(x[i]);
    if ((double)a < 3.0e38 && a > m) m = a;
  }
  return m;
}

// scaleFromAmax: amax · f32(1 / max), or 1 below the smallest normal (an all-zero row).
INLINE float scale_from_amax(float amax, float recip_max) {
  float s = amax * recip_max;
  return s < MIN_SCALE ? 1.0f : s;
}

INLINE float inverse_scale(float s) { return s == 0.0f ? 0.0f : 1.0f / s; }

// int8Encode: round-half-even of x · inv, clamped to ±127 (NaN, and inf · 0, give 0).
INLINE u32 int8_encode(float x, float inv) {
  if (is_nan_bits(f32_bits(x))) return 0;
  float v = x * inv;
  if (v != v) return 0;
  float q = __builtin_rintf(v);
  if (q > 127.0f) q = 127.0f;
  if (q < -127.0f) q = -127.0f;
  return (u32)(i32)q & 0xffu;
}

// encodeFloatBits (saturating) for the two OCP FP8 formats.
static inline u32 fp8_encode(u32 bits, i32 e5m2) {
  i32 m = e5m2 ? 2 : 3;
  i32 bias = e5m2 ? 15 : 7;
  u32 max_code = e5m2 ? 0x7bu : 0x7eu;
  u32 nan_code = e5m2 ? 0x7eu : 0x7fu;
  u32 sign = (bits >> 24) & 0x80u;
  u32 a = bits & 0x7fffffffu;
  if (a > 0x7f800000u) return e5m2 ? sign | nan_code | ((a & 0x7fffffu) >> (23 - m)) : sign | nan_code;
  if (a == 0x7f800000u) return sign | (e5m2 ? 0x7cu : max_code);
  u32 e32 = a >> 23;
  u32 r;
  if (e32 > (u32)(127 - bias)) {
    u32 v = a - ((u32)(127 - bias) << 23);
    u32 shift = (u32)(23 - m);
    r = (v + ((1u << (shift - 1)) - 1) + ((v >> shift) & 1u)) >> shift;
  } else {
    u32 mant = (a & 0x7fffffu) | (e32 ? 0x800000u : 0u);
    i32 s = 151 - bias - m - (e32 ? (i32)e32 : 1);
    if (s > 24) {
      r = 0;
    } else {
      r = mant >> s;
      u32 rem = mant & ((1u << s) - 1u);
      u32 half = 1u << (s - 1);
      if (rem > half || (rem == half && (r & 1u))) r++;
    }
  }
  if (r > max_code) r = max_code;
  return sign | r;
}

// int4Encode: round(x · inv) + zero, clamped to 0..15 (NaN gives 0).
INLINE u32 int4_encode(float x, float inv, float zero) {
  if (is_nan_bits(f32_bits(x))) return 0;
  float v = x * inv;
  if (v != v) return 0;
  float q = __builtin_rintf(v) + zero;
  if (q > 15.0f) q = 15.0f;
  if (q < 0.0f) q = 0.0f;
  return (u32)q;
}

// hadamardF32: the unnormalized transform of every run of `size` elements, in its stage order.
static inline void hadamard(float* x, i32 n, i32 size) {
  for (i32 base = 0; base < n; base += size) {
    for (i32 h = 1; h < size; h <<= 1) {
      for (i32 i = base; i < base + size; i += 2 * h) {
        for (i32 j = i; j < i + h; j++) {
          float a = x[j], b = x[j + h];
          x[j] = a + b;
          x[j + h] = a - b;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Row encoders: row `t` of the slab at `slab` (rw words per row, bs rows).

// int8 and fp8 (x possibly rotated already): the codes, then the row's scale word.
static inline void store_byte_row(u32* slab, i32 t, const float* x, i32 d, i32 bs, i32 fmt) {
  i32 rw = d / 4;
  float recip = fmt == KV_FP8_E4M3 ? 1.0f / 448.0f : fmt == KV_FP8_E5M2 ? 1.0f / 57344.0f
                                                                          : 1.0f / 127.0f;
  float scale = scale_from_amax(row_amax(x, d), recip);
  float inv = inverse_scale(scale);
  slab[bs * rw + t] = f32_bits(scale);
  u32* row = slab + (long)t * rw;
  for (i32 i = 0; i < rw; i++) {
    u32 w = 0;
    for (i32 j = 0; j < 4; j++) {
      float v = x[4 * i + j];
      u32 code = fmt == KV_INT8 || fmt == KV_INT8_H8 ? int8_encode(v, inv)
                                                      : fp8_encode(f32_bits(v * inv), fmt == KV_FP8_E5M2);
      w |= code << (8 * j);
    }
    row[i] = w;
  }
}

// int4 in groups of 32 (int4EncodeRow): codes, then per row one (scale, zero point) pair per
// group. NaN and infinities do not set a group's range.
static inline void store_int4_row(u32* slab, i32 t, const float* x, i32 d, i32 bs) {
  i32 rw = d / 8;
  i32 sw = 2 * d / INT4_GROUP;
  for (i32 g = 0; g < d / INT4_GROUP; g++) {
    const float* xg = x + g * INT4_GROUP;
    float lo = __builtin_inff(), hi = -__builtin_inff();
    for (i32 j = 0; j < INT4_GROUP; j++) {
      float v = xg[j];
      if (!is_finite_f32(v)) continue;
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
    if (lo > hi) lo = hi = 0.0f;
    float span = (hi - lo) * (1.0f / 15.0f);
    float alo = __builtin_fabsf(lo), ahi = __builtin_fabsf(hi);
    float floor = (alo > ahi ? alo : ahi) * 9.5367431640625e-07f;  // 2^-20
    float scale = span > floor ? span : floor;
    if (scale < MIN_SCALE) scale = 0.0f;
    float inv = inverse_scale(scale);
    float zero = -__builtin_rintf(lo * inv);
    u32* sz = slab + bs * rw + t * sw + 2 * g;
    sz[0] = f32_bits(scale);
    sz[1] = f32_bits(zero);
    u32* codes = slab + (long)t * rw + (INT4_GROUP / 8) * g;
    for (i32 k = 0; k < INT4_GROUP / 8; k++) {
      u32 w = 0;
      for (i32 j = 0; j < 8; j++) w |= int4_encode(xg[8 * k + j], inv, zero) << (4 * j);
      codes[k] = w;
    }
  }
}

// Encodes the d floats at x into row t of the slab (kv-format's encodeRow for `fmt`).
static void kv_store_row(u32* slab, i32 t, const float* x, i32 d, i32 bs, i32 fmt) {
  if (fmt == KV_F32) {
    float* f = (float*)(slab + (long)t * d);
    for (i32 e = 0; e < d; e += 4) wasm_v128_store(f + e, ld(x + e));
    return;
  }
  if (fmt == KV_F16) {
    u32* row = slab + (long)t * (d / 2);
    for (i32 e = 0; e < d; e += 2) row[e / 2] = f32_to_f16(x[e]) | (f32_to_f16(x[e + 1]) << 16);
    return;
  }
  i32 rot = kv_rotation(fmt);
  float y[KV_MAX_HEAD_DIM];
  if (rot) {
    for (i32 e = 0; e < d; e++) y[e] = x[e];
    hadamard(y, d, rot);
    x = y;
  }
  if (fmt == KV_INT4 || fmt == KV_INT4_H32) store_int4_row(slab, t, x, d, bs);
  else store_byte_row(slab, t, x, d, bs, fmt);
}

// ---------------------------------------------------------------------------------------------
// Row loaders for attention: the values of row t as f32 (see the header for `factor` and the
// rotated formats), in `buf` unless the cache holds them as f32 already.

// Sixteen bytes of int8 codes to 16 floats.
INLINE void i8x16_to_f32(v128_t b, float* out) {
  v128_t lo = wasm_i16x8_extend_low_i8x16(b), hi = wasm_i16x8_extend_high_i8x16(b);
  wasm_v128_store(out, wasm_f32x4_convert_i32x4(wasm_i32x4_extend_low_i16x8(lo)));
  wasm_v128_store(out + 4, wasm_f32x4_convert_i32x4(wasm_i32x4_extend_high_i16x8(lo)));
  wasm_v128_store(out + 8, wasm_f32x4_convert_i32x4(wasm_i32x4_extend_low_i16x8(hi)));
  wasm_v128_store(out + 12, wasm_f32x4_convert_i32x4(wasm_i32x4_extend_high_i16x8(hi)));
}

// Four fp8 codes (one per u32 lane) to their values: the exponent and mantissa shifted into
// f32 place read 2^(127 - bias) too small (subnormals included), so one multiply fixes the
// scale. The NaN code reads as a large finite number: encoders never write it for finite rows.
INLINE v128_t fp8x4_to_f32(v128_t c, i32 e5m2) {
  v128_t sign = wasm_i32x4_shl(wasm_v128_and(c, wasm_i32x4_const_splat(0x80)), 24);
  v128_t mag = wasm_i32x4_shl(wasm_v128_and(c, wasm_i32x4_const_splat(0x7f)), e5m2 ? 21 : 20);
  v128_t f = wasm_v128_or(sign, mag);
  return wasm_f32x4_mul(f, e5m2 ? wasm_f32x4_const_splat(5.192296858534828e+33f)    // 2^112
                                : wasm_f32x4_const_splat(1.329227995784916e+36f));  // 2^120
}

INLINE void fp8x16_to_f32(v128_t b, float* out, i32 e5m2) {
  v128_t lo = wasm_u16x8_extend_low_u8x16(b), hi = wasm_u16x8_extend_high_u8x16(b);
  wasm_v128_store(out, fp8x4_to_f32(wasm_u32x4_extend_low_u16x8(lo), e5m2));
  wasm_v128_store(out + 4, fp8x4_to_f32(wasm_u32x4_extend_high_u16x8(lo), e5m2));
  wasm_v128_store(out + 8, fp8x4_to_f32(wasm_u32x4_extend_low_u16x8(hi), e5m2));
  wasm_v128_store(out + 12, fp8x4_to_f32(wasm_u32x4_extend_high_u16x8(hi), e5m2));
}

// One int4 group (4 words: element 8i + j in nibble j of word i, so element 2k is the low and
// 2k + 1 the high nibble of byte k) to (code - zero) · scale.
INLINE void int4x32_to_f32(const u32* w, float scale, float zero, float* out) {
  v128_t v = ld(w);
  v128_t lo = wasm_v128_and(v, wasm_i8x16_const_splat(0x0f));
  v128_t hi = wasm_u8x16_shr(v, 4);
  v128_t a = wasm_i8x16_shuffle(lo, hi, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  v128_t b = wasm_i8x16_shuffle(lo, hi, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15,
                                31);
  v128_t s = wasm_f32x4_splat(scale), z = wasm_f32x4_splat(zero);
  v128_t halves[4] = {wasm_u16x8_extend_low_u8x16(a), wasm_u16x8_extend_high_u8x16(a),
                      wasm_u16x8_extend_low_u8x16(b), wasm_u16x8_extend_high_u8x16(b)};
  for (i32 k = 0; k < 4; k++) {
    v128_t l = wasm_f32x4_convert_i32x4(wasm_u32x4_extend_low_u16x8(halves[k]));
    v128_t h = wasm_f32x4_convert_i32x4(wasm_u32x4_extend_high_u16x8(halves[k]));
    wasm_v128_store(out + 8 * k, wasm_f32x4_mul(wasm_f32x4_sub(l, z), s));
    wasm_v128_store(out + 8 * k + 4, wasm_f32x4_mul(wasm_f32x4_sub(h, z), s));
  }
}

// Row t of the slab for attention; sets *factor (1 unless int8 or fp8).
INLINE const float* kv_load_row(const u32* slab, i32 t, i32 d, i32 bs, i32 fmt, float* buf,
                                float* factor) {
  *factor = 1.0f;
  if (fmt == KV_F32) return (const float*)(slab + (long)t * d);
  if (fmt == KV_F16) {
    const uint16_t* r = (const uint16_t*)(slab + (long)t * (d / 2));
    for (i32 e = 0; e < d; e += 8) {
      v128_t h = ld(r + e);
      wasm_v128_store(buf + e, half_lo(h));
      wasm_v128_store(buf + e + 4, half_hi(h));
    }
    return buf;
  }
  if (fmt == KV_INT4 || fmt == KV_INT4_H32) {
    i32 rw = d / 8;
    const u32* codes = slab + (long)t * rw;
    const float* sz = (const float*)(slab + bs * rw + t * (2 * d / INT4_GROUP));
    for (i32 g = 0; g < d / INT4_GROUP; g++)
      int4x32_to_f32(codes + 4 * g, sz[2 * g], sz[2 * g + 1], buf + INT4_GROUP * g);
    return buf;
  }
  i32 rw = d / 4;
  const int8_t* codes = (const int8_t*)(slab + (long)t * rw);
  *factor = bits_f32(slab[bs * rw + t]);
  i32 e = 0;
  if (fmt == KV_INT8 || fmt == KV_INT8_H8) {
    for (; e + 16 <= d; e += 16) i8x16_to_f32(ld(codes + e), buf + e);
    if (e < d) {  // d is a multiple of 8: one last half vector
      float tail[16];
      i8x16_to_f32(wasm_v128_load64_zero(codes + e), tail);
      for (i32 k = 0; k < 8; k++) buf[e + k] = tail[k];
    }
    return buf;
  }
  i32 e5m2 = fmt == KV_FP8_E5M2;
  for (; e + 16 <= d; e += 16) fp8x16_to_f32(ld(codes + e), buf + e, e5m2);
  if (e < d) {
    float tail[16];
    fp8x16_to_f32(wasm_v128_load64_zero(codes + e), tail, e5m2);
    for (i32 k = 0; k < 8; k++) buf[e + k] = tail[k];
  }
  return buf;
}

// ---------------------------------------------------------------------------------------------
// Exact row decoders (kv-format's decodeRow, bit for bit): for key shifts, which decode, rotate
// and encode again, so the result must not depend on the backend.

// decodeFloatBits for the two OCP FP8 formats (infinities and NaN codes included).
static inline u32 fp8_decode_bits(u32 code, i32 e5m2) {
  i32 m = e5m2 ? 2 : 3;
  i32 bias = e5m2 ? 15 : 7;
  u32 sign = ((code >> 7) & 1u) << 31;
  u32 mag = code & 0x7fu;
  u32 e = mag >> m;
  u32 f = mag & ((1u << m) - 1u);
  if (e5m2 && e == 31u) return sign | (f == 0 ? 0x7f800000u : 0x7fc00000u | (f << (23 - m)));
  if (!e5m2 && mag == 0x7fu) return sign | 0x7fc00000u;
  if (e == 0) {
    if (f == 0) return sign;
    i32 p = 31 - __builtin_clz(f);
    u32 biased = (u32)(128 - bias - m + p);
    return sign | (biased << 23) | ((f << (23 - p)) & 0x7fffffu);
  }
  return sign | ((e - (u32)bias + 127u) << 23) | (f << (23 - m));
}

// Row t of the slab, decoded exactly as the TypeScript decodeRow of its format.
static void kv_decode_row(const u32* slab, i32 t, float* out, i32 d, i32 bs, i32 fmt) {
  if (fmt == KV_F32) {
    const float* r = (const float*)(slab + (long)t * d);
    for (i32 e = 0; e < d; e++) out[e] = r[e];
    return;
  }
  if (fmt == KV_F16) {
    const uint16_t* r = (const uint16_t*)(slab + (long)t * (d / 2));
    for (i32 e = 0; e < d; e++) out[e] = f16_to_f32(r[e]);
    return;
  }
  if (fmt == KV_INT4 || fmt == KV_INT4_H32) {
    i32 rw = d / 8;
    const u32* codes = slab + (long)t * rw;
    const float* sz = (const float*)(slab + bs * rw + t * (2 * d / INT4_GROUP));
    for (i32 e = 0; e < d; e++) out[e] = (float)((codes[e >> 3] >> (4 * (e & 7))) & 15u);
    for (i32 g = 0; g < d / INT4_GROUP; g++) {
      float* x = out + g * INT4_GROUP;
      float scale = sz[2 * g], zero = sz[2 * g + 1];
      if (fmt == KV_INT4) {
        for (i32 j = 0; j < INT4_GROUP; j++) x[j] = (x[j] - zero) * scale;
        continue;
      }
      // H32 of the codes (small integers: exact in any order); the zero point moves element 0
      // only (the transform of a constant), then one product applies scale / 32.
      hadamard(x, INT4_GROUP, INT4_GROUP);
      x[0] = x[0] - 32.0f * zero;
      float s = scale * 0.03125f;
      for (i32 j = 0; j < INT4_GROUP; j++) x[j] = x[j] * s;
    }
    return;
  }
  i32 rw = d / 4;
  const uint8_t* codes = (const uint8_t*)(slab + (long)t * rw);
  float scale = bits_f32(slab[bs * rw + t]);
  if (fmt == KV_INT8) {
    for (i32 e = 0; e < d; e++) out[e] = (float)(int8_t)codes[e] * scale;
    return;
  }
  if (fmt == KV_INT8_H8) {
    for (i32 e = 0; e < d; e++) out[e] = (float)(int8_t)codes[e];
    hadamard(out, d, 8);
    float s = scale * 0.125f;
    for (i32 e = 0; e < d; e++) out[e] = out[e] * s;
    return;
  }
  i32 e5m2 = fmt == KV_FP8_E5M2;
  for (i32 e = 0; e < d; e++) out[e] = bits_f32(fp8_decode_bits(codes[e], e5m2)) * scale;
}

#endif
