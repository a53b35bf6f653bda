// Helpers shared by the kernel files (kernels.c, attention.c): types, scalar and SIMD
// conversions, and the work split. Everything here is static inline, so each file keeps only
// what it uses.

#ifndef KVASIR_COMMON_H
#define KVASIR_COMMON_H

#include <stdint.h>
#include <wasm_simd128.h>

#define EXPORT(name) __attribute__((export_name(#name)))
#define INLINE static inline __attribute__((always_inline))

typedef int32_t i32;
typedef uint32_t u32;

// ---------------------------------------------------------------------------------------------
// Scalar helpers.

INLINE float bits_f32(u32 b) {
  union { u32 u; float f; } v = {.u = b};
  return v.f;
}

INLINE u32 f32_bits(float f) {
  union { float f; u32 u; } v = {.f = f};
  return v.u;
}

// exp for softmax and SiLU: 2^n · p(r), |r| <= ln2/2, degree-7 Taylor (relative error < 1e-7).
static inline float expf_(float x) {
  if (x < -103.0f) return 0.0f;
  if (x > 88.7f) return bits_f32(0x7f800000u);
  float n = __builtin_rintf(x * 1.44269504088896341f);
  float r = x - n * 0.693145751953125f - n * 1.428606765330187e-06f;
  float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.6666667e-1f + r * (4.1666668e-2f +
            r * (8.3333338e-3f + r * (1.3888889e-3f + r * 1.9841270e-4f))))));
  i32 e = (i32)n;
  // Split the scale in two so results down to the subnormals stay right.
  if (e < -125) {
    p *= bits_f32((u32)(e + 100 + 127) << 23);
    return p * bits_f32((u32)(-100 + 127) << 23);
  }
  return p * bits_f32((u32)(e + 127) << 23);
}

// IEEE binary16 bits to f32, exact for every finite value (the reference is @kvasir/quantizer).
static inline float f16_to_f32(u32 h) {
  u32 sign = (h & 0x8000u) << 16;
  u32 exp = (h >> 10) & 0x1fu;
  u32 mant = h & 0x3ffu;
  if (exp == 0) {
    float v = (float)mant * 5.9604644775390625e-08f;  // 2^-24
    return sign ? -v : v;
  }
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (mant << 13));
  return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

// f32 to binary16 bits, round to nearest even, the same bits as @kvasir/quantizer's f32ToF16Bits.
static inline u32 f32_to_f16(float x) {
  u32 bits = f32_bits(x);
  u32 sign = (bits >> 16) & 0x8000u;
  i32 exp = (i32)((bits >> 23) & 0xffu);
  u32 mant = bits & 0x7fffffu;
  if (exp == 0xff) return sign | 0x7c00u | (mant ? (0x200u | (mant >> 13)) : 0u);
  i32 e = exp - 112;
  if (e >= 0x1f) return sign | 0x7c00u;
  if (e <= 0) {
    if (e < -10) return sign;
    u32 full = mant | 0x800000u;
    u32 shift = (u32)(14 - e);
    u32 half = full >> shift;
    u32 rem = full & ((1u << shift) - 1u);
    u32 halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (half & 1u))) half++;
    return sign | half;
  }
  u32 half = ((u32)e << 10) | (mant >> 13);
  u32 rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) half++;
  return sign | half;
}

// ---------------------------------------------------------------------------------------------
// SIMD helpers.

INLINE float hsum(v128_t v) {
  return wasm_f32x4_extract_lane(v, 0) + wasm_f32x4_extract_lane(v, 1) +
         wasm_f32x4_extract_lane(v, 2) + wasm_f32x4_extract_lane(v, 3);
}

INLINE v128_t madd(v128_t acc, v128_t a, v128_t b) {
  return wasm_f32x4_add(acc, wasm_f32x4_mul(a, b));
}

// Four halves (sign-extended to i32 lanes) to f32: the exponent and mantissa shifted into
// place read as an f32 2^112 too small (subnormal halves included), so one multiply fixes the
// scale. Infinities and NaNs come out as large finite numbers: weights and cached K/V have none.
INLINE v128_t half4_to_f32(v128_t s32) {
  v128_t b = wasm_v128_and(wasm_i32x4_shl(s32, 13), wasm_i32x4_const_splat((i32)0x8fffe000u));
  return wasm_f32x4_mul(b, wasm_f32x4_const_splat(5.192296858534828e+33f));  // 2^112
}

INLINE v128_t half_lo(v128_t h8) { return half4_to_f32(wasm_i32x4_extend_low_i16x8(h8)); }
INLINE v128_t half_hi(v128_t h8) { return half4_to_f32(wasm_i32x4_extend_high_i16x8(h8)); }

INLINE v128_t ld(const void* p) { return wasm_v128_load(p); }

// ---------------------------------------------------------------------------------------------
// Work split: thread t of n gets [lo, hi) of `count` items, in whole `unit`s.

INLINE void split(i32 count, i32 unit, i32 tid, i32 nth, i32* lo, i32* hi) {
  i32 units = (count + unit - 1) / unit;
  i32 per = units / nth;
  i32 extra = units % nth;
  i32 a = tid * per + (tid < extra ? tid : extra);
  i32 b = a + per + (tid < extra ? 1 : 0);
  a *= unit;
  b *= unit;
  *lo = a < count ? a : count;
  *hi = b < count ? b : count;
}

// x (k floats) to int16 per group of gs: xq = round(x / s), s = max|x| / 32767 per group.
static inline void quantize_x16(const float* x, i32 k, i32 gs, int16_t* xq, float* xs) {
  for (i32 g = 0; g < k; g += gs) {
    v128_t mx = wasm_f32x4_splat(0);
    for (i32 i = g; i < g + gs; i += 4) mx = wasm_f32x4_max(mx, wasm_f32x4_abs(ld(x + i)));
    float m = wasm_f32x4_extract_lane(mx, 0);
    for (i32 l = 1; l < 4; l++) {
      float v = l == 1 ? wasm_f32x4_extract_lane(mx, 1)
                       : l == 2 ? wasm_f32x4_extract_lane(mx, 2) : wasm_f32x4_extract_lane(mx, 3);
      if (v > m) m = v;
    }
    float scale = m / 32767.0f;
    xs[g / gs] = scale;
    v128_t inv = wasm_f32x4_splat(scale > 0.0f ? 1.0f / scale : 0.0f);
    for (i32 i = g; i < g + gs; i += 8) {
      v128_t q0 = wasm_i32x4_trunc_sat_f32x4(wasm_f32x4_nearest(wasm_f32x4_mul(ld(x + i), inv)));
      v128_t q1 =
          wasm_i32x4_trunc_sat_f32x4(wasm_f32x4_nearest(wasm_f32x4_mul(ld(x + i + 4), inv)));
      wasm_v128_store(xq + i, wasm_i16x8_narrow_i32x4(q0, q1));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Ops defined in attention.c (record layouts there).

void op_rope_kv(const i32* a, i32 tid, i32 nth);
void op_attention(const i32* a, i32 tid, i32 nth);
void op_key_shift(const i32* a, i32 tid, i32 nth);

#endif
