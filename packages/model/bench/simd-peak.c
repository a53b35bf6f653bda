// The ceiling the wasm GGML kernels are measured against: multiply-adds per second of SIMD128's
// widest integer product (i32x4.dot_i16x8_s, 8 per instruction, what the plain build's dot
// products are made of) and of f32x4 mul + add (4), in a loop of only loads, products and
// accumulator adds over L1-resident data, 8 independent accumulators. simd-peak.ts builds it.

#include <stdint.h>
#include <wasm_simd128.h>

static int16_t buf[4096] __attribute__((aligned(16)));

#define STEP(op, acc, off) acc = op(acc, wasm_v128_load(p + (off)), x)

static inline v128_t i16_dot(v128_t acc, v128_t w, v128_t x) {
  return wasm_i32x4_add(acc, wasm_i32x4_dot_i16x8(w, x));
}

static inline v128_t f32_madd(v128_t acc, v128_t w, v128_t x) {
  return wasm_f32x4_add(acc, wasm_f32x4_mul(w, x));
}

/** `iters` passes over the buffer: mode 0 the i16 dot, 1 the f32 multiply-add. */
__attribute__((export_name("run"))) int32_t run(int32_t iters, int32_t mode) {
  v128_t a0 = wasm_i32x4_splat(0), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (int32_t i = 0; i < 4096; i++) buf[i] = (int16_t)(i * 7);
  for (int32_t it = 0; it < iters; it++) {
    for (int32_t j = 0; j < 4096; j += 64) {
      const int16_t* p = buf + j;
      v128_t x = wasm_v128_load(p);
      if (mode == 0) {
        STEP(i16_dot, a0, 0); STEP(i16_dot, a1, 8); STEP(i16_dot, a2, 16); STEP(i16_dot, a3, 24);
        STEP(i16_dot, a4, 32); STEP(i16_dot, a5, 40); STEP(i16_dot, a6, 48); STEP(i16_dot, a7, 56);
      } else {
        STEP(f32_madd, a0, 0); STEP(f32_madd, a1, 8); STEP(f32_madd, a2, 16); STEP(f32_madd, a3, 24);
        STEP(f32_madd, a4, 32); STEP(f32_madd, a5, 40); STEP(f32_madd, a6, 48); STEP(f32_madd, a7, 56);
      }
    }
  }
  v128_t s = wasm_i32x4_add(wasm_i32x4_add(wasm_i32x4_add(a0, a1), wasm_i32x4_add(a2, a3)),
                            wasm_i32x4_add(wasm_i32x4_add(a4, a5), wasm_i32x4_add(a6, a7)));
  return wasm_i32x4_extract_lane(s, 0);
}
