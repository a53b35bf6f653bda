// Kvasir's CPU kernels in WebAssembly SIMD128, and the thread runtime that runs them.
//
// Built by scripts/build-wasm.mjs with clang --target=wasm32 (no libc): every buffer lives in
// one shared memory that TypeScript lays out, so the kernels take byte offsets and never
// allocate. A forward step is a *program*: an array of fixed-size op records. Every thread
// (the caller as thread 0, the workers as 1..n-1) walks the same program, takes its share of
// each op's rows, and meets the others at a barrier only where an op reads what an earlier
// one wrote. So one step costs one wake-up per worker, whatever the number of layers.
//
// A few small arrays live on the shadow stack: every worker's instance points its own
// __stack_pointer (exported for that) at a stack of its own (thread-pool.ts).

#include "common.h"
#include "ggml-matmul.h"
#include "matmul-epilogue.h"

// ---------------------------------------------------------------------------------------------
// Op records: OP_WORDS i32 words each; word 0 is the opcode, bit 31 of it "barrier after".
// The TypeScript twin of these numbers is wasm-program.ts.

#define OP_WORDS 32
#define OP_BARRIER 0x80000000u

enum {
  OP_NOP = 0,
  OP_MATMUL = 1,
  OP_RMSNORM = 2,
  OP_EMBED = 3,
  OP_ROPE_KV = 4,
  OP_ATTENTION = 5,
  OP_STREAM = 6,
  OP_KEY_SHIFT = 7,
  OP_QUANTIZE = 8,
};

enum { WF_F32 = 0, WF_F16 = 1, WF_INT8 = 2 };  // GGML blocks: ggml-matmul.h

// ---------------------------------------------------------------------------------------------
// Dense rows: decode and dot products.

// Decodes row `r` of a packed matrix into f32.
static void decode_row(const u32* w, i32 fmt, i32 k, const float* scales, i32 gs, i32 r,
                       float* out) {
  if (fmt >= WF_GGML_FIRST) {
    ggml_decode_row((const uint8_t*)w, fmt, k, r, out);
    return;
  }
  if (fmt == WF_F32) {
    const float* src = (const float*)w + (long)r * k;
    for (i32 i = 0; i < k; i += 4) wasm_v128_store(out + i, ld(src + i));
    return;
  }
  if (fmt == WF_F16) {
    const uint16_t* src = (const uint16_t*)w + (long)r * k;
    i32 i = 0;
    for (; i + 8 <= k; i += 8) {
      v128_t h = ld(src + i);
      wasm_v128_store(out + i, half_lo(h));
      wasm_v128_store(out + i + 4, half_hi(h));
    }
    for (; i < k; i++) out[i] = f16_to_f32(src[i]);
    return;
  }
  const int8_t* src = (const int8_t*)w + (long)r * k;
  const float* sc = scales + (long)r * (k / gs);
  for (i32 g = 0; g < k; g += gs) {
    v128_t s = wasm_f32x4_splat(sc[g / gs]);
    for (i32 i = g; i < g + gs; i += 4) {
      v128_t b = wasm_v128_load32_zero(src + i);
      v128_t v = wasm_f32x4_convert_i32x4(
          wasm_i32x4_extend_low_i16x8(wasm_i16x8_extend_low_i8x16(b)));
      wasm_v128_store(out + i, wasm_f32x4_mul(v, s));
    }
  }
}

// Four f32 rows against one x row.
INLINE void dot4_f32(const float* w, i32 k, const float* x, float* o) {
  const float* w0 = w;
  const float* w1 = w + k;
  const float* w2 = w + 2 * k;
  const float* w3 = w + 3 * k;
  v128_t a0 = wasm_f32x4_splat(0), a1 = a0, a2 = a0, a3 = a0;
  v128_t b0 = a0, b1 = a0, b2 = a0, b3 = a0;
  i32 i = 0;
  for (; i + 8 <= k; i += 8) {
    v128_t x0 = ld(x + i), x1 = ld(x + i + 4);
    a0 = madd(a0, ld(w0 + i), x0);
    a1 = madd(a1, ld(w1 + i), x0);
    a2 = madd(a2, ld(w2 + i), x0);
    a3 = madd(a3, ld(w3 + i), x0);
    b0 = madd(b0, ld(w0 + i + 4), x1);
    b1 = madd(b1, ld(w1 + i + 4), x1);
    b2 = madd(b2, ld(w2 + i + 4), x1);
    b3 = madd(b3, ld(w3 + i + 4), x1);
  }
  for (; i < k; i += 4) {
    v128_t x0 = ld(x + i);
    a0 = madd(a0, ld(w0 + i), x0);
    a1 = madd(a1, ld(w1 + i), x0);
    a2 = madd(a2, ld(w2 + i), x0);
    a3 = madd(a3, ld(w3 + i), x0);
  }
  o[0] = hsum(wasm_f32x4_add(a0, b0));
  o[1] = hsum(wasm_f32x4_add(a1, b1));
  o[2] = hsum(wasm_f32x4_add(a2, b2));
  o[3] = hsum(wasm_f32x4_add(a3, b3));
}

// Four f16 rows against one x row, converting in registers (the decode hot path).
INLINE void dot4_f16(const uint16_t* w, i32 k, const float* x, float* o) {
  const uint16_t* w0 = w;
  const uint16_t* w1 = w + k;
  const uint16_t* w2 = w + 2 * k;
  const uint16_t* w3 = w + 3 * k;
  v128_t a0 = wasm_f32x4_splat(0), a1 = a0, a2 = a0, a3 = a0;
  v128_t b0 = a0, b1 = a0, b2 = a0, b3 = a0;
  i32 i = 0;
  for (; i + 8 <= k; i += 8) {
    v128_t x0 = ld(x + i), x1 = ld(x + i + 4);
    v128_t h0 = ld(w0 + i), h1 = ld(w1 + i), h2 = ld(w2 + i), h3 = ld(w3 + i);
    a0 = madd(a0, half_lo(h0), x0);
    b0 = madd(b0, half_hi(h0), x1);
    a1 = madd(a1, half_lo(h1), x0);
    b1 = madd(b1, half_hi(h1), x1);
    a2 = madd(a2, half_lo(h2), x0);
    b2 = madd(b2, half_hi(h2), x1);
    a3 = madd(a3, half_lo(h3), x0);
    b3 = madd(b3, half_hi(h3), x1);
  }
  if (i < k) {  // k is a multiple of 4: one last group of four halves
    v128_t x0 = ld(x + i);
    a0 = madd(a0, half_lo(wasm_v128_load64_zero(w0 + i)), x0);
    a1 = madd(a1, half_lo(wasm_v128_load64_zero(w1 + i)), x0);
    a2 = madd(a2, half_lo(wasm_v128_load64_zero(w2 + i)), x0);
    a3 = madd(a3, half_lo(wasm_v128_load64_zero(w3 + i)), x0);
  }
  o[0] = hsum(wasm_f32x4_add(a0, b0));
  o[1] = hsum(wasm_f32x4_add(a1, b1));
  o[2] = hsum(wasm_f32x4_add(a2, b2));
  o[3] = hsum(wasm_f32x4_add(a3, b3));
}

// Sixteen int8 weights times four x vectors, summed into acc.
INLINE v128_t dot16_i8(v128_t acc, v128_t b, const float* x) {
  v128_t lo = wasm_i16x8_extend_low_i8x16(b);
  v128_t hi = wasm_i16x8_extend_high_i8x16(b);
  acc = madd(acc, wasm_f32x4_convert_i32x4(wasm_i32x4_extend_low_i16x8(lo)), ld(x));
  acc = madd(acc, wasm_f32x4_convert_i32x4(wasm_i32x4_extend_high_i16x8(lo)), ld(x + 4));
  acc = madd(acc, wasm_f32x4_convert_i32x4(wasm_i32x4_extend_low_i16x8(hi)), ld(x + 8));
  acc = madd(acc, wasm_f32x4_convert_i32x4(wasm_i32x4_extend_high_i16x8(hi)), ld(x + 12));
  return acc;
}

INLINE v128_t dot4_i8(v128_t acc, const int8_t* w, const float* x) {
  v128_t b = wasm_v128_load32_zero(w);
  v128_t v = wasm_f32x4_convert_i32x4(wasm_i32x4_extend_low_i16x8(wasm_i16x8_extend_low_i8x16(b)));
  return madd(acc, v, ld(x));
}

// Two int8 rows (group scales) against one x row. Each group's sum is scaled once.
INLINE void dot2_i8(const int8_t* w, const float* scales, i32 k, i32 gs, const float* x,
                    float* o) {
  const int8_t* w0 = w;
  const int8_t* w1 = w + k;
  const float* s0 = scales;
  const float* s1 = scales + k / gs;
  v128_t t0 = wasm_f32x4_splat(0), t1 = t0;
  for (i32 g = 0; g < k; g += gs) {
    v128_t a0 = wasm_f32x4_splat(0), a1 = a0;
    i32 i = g;
    for (; i + 16 <= g + gs; i += 16) {
      a0 = dot16_i8(a0, ld(w0 + i), x + i);
      a1 = dot16_i8(a1, ld(w1 + i), x + i);
    }
    for (; i < g + gs; i += 4) {
      a0 = dot4_i8(a0, w0 + i, x + i);
      a1 = dot4_i8(a1, w1 + i, x + i);
    }
    t0 = madd(t0, a0, wasm_f32x4_splat(s0[g / gs]));
    t1 = madd(t1, a1, wasm_f32x4_splat(s1[g / gs]));
  }
  o[0] = hsum(t0);
  o[1] = hsum(t1);
}

// int8 rows against x quantized to int16 per weight group (quantize_x16): i16 × i16 pair dot
// products in i32 (a group of 32 sums at most 32 · 127 · 32767 < 2^31), one float multiply per
// group. x's own rounding is 2^-16 of its group's largest value, far below the weights' 2^-8.
INLINE void dot2_i8x16(const int8_t* w, const float* scales, i32 k, i32 gs, const int16_t* xq,
                       const float* xs, float* o) {
  const int8_t* w0 = w;
  const int8_t* w1 = w + k;
  const float* s0 = scales;
  const float* s1 = scales + k / gs;
  v128_t t0 = wasm_f32x4_splat(0), t1 = t0;
  for (i32 g = 0; g < k; g += gs) {
    v128_t a0 = wasm_i32x4_splat(0), a1 = a0;
    for (i32 i = g; i < g + gs; i += 16) {
      v128_t xlo = ld(xq + i), xhi = ld(xq + i + 8);
      v128_t b0 = ld(w0 + i), b1 = ld(w1 + i);
      a0 = wasm_i32x4_add(a0, wasm_i32x4_dot_i16x8(wasm_i16x8_extend_low_i8x16(b0), xlo));
      a0 = wasm_i32x4_add(a0, wasm_i32x4_dot_i16x8(wasm_i16x8_extend_high_i8x16(b0), xhi));
      a1 = wasm_i32x4_add(a1, wasm_i32x4_dot_i16x8(wasm_i16x8_extend_low_i8x16(b1), xlo));
      a1 = wasm_i32x4_add(a1, wasm_i32x4_dot_i16x8(wasm_i16x8_extend_high_i8x16(b1), xhi));
    }
    float xsg = xs[g / gs];
    t0 = madd(t0, wasm_f32x4_convert_i32x4(a0), wasm_f32x4_splat(s0[g / gs] * xsg));
    t1 = madd(t1, wasm_f32x4_convert_i32x4(a1), wasm_f32x4_splat(s1[g / gs] * xsg));
  }
  o[0] = hsum(t0);
  o[1] = hsum(t1);
}

// One row of any format against one x row (tails of row tiles).
static float dot1(const u32* w, i32 fmt, i32 k, const float* scales, i32 gs, i32 r,
                  const float* x) {
  v128_t a = wasm_f32x4_splat(0);
  if (fmt == WF_F32) {
    const float* p = (const float*)w + (long)r * k;
    for (i32 i = 0; i < k; i += 4) a = madd(a, ld(p + i), ld(x + i));
    return hsum(a);
  }
  if (fmt == WF_F16) {
    const uint16_t* p = (const uint16_t*)w + (long)r * k;
    for (i32 i = 0; i < k; i += 4) a = madd(a, half_lo(wasm_v128_load64_zero(p + i)), ld(x + i));
    return hsum(a);
  }
  const int8_t* p = (const int8_t*)w + (long)r * k;
  const float* sc = scales + (long)r * (k / gs);
  v128_t t = a;
  for (i32 g = 0; g < k; g += gs) {
    v128_t s = wasm_f32x4_splat(0);
    for (i32 i = g; i < g + gs; i += 4) s = dot4_i8(s, p + i, x + i);
    t = madd(t, s, wasm_f32x4_splat(sc[g / gs]));
  }
  return hsum(t);
}

// 4 f32 weight rows (stride k) × 2 x rows (stride k): 8 results, o[r * 2 + j].
INLINE void tile4x2(const float* w, const float* x0, const float* x1, i32 k, float* o) {
  const float* w0 = w;
  const float* w1 = w + k;
  const float* w2 = w + 2 * k;
  const float* w3 = w + 3 * k;
  v128_t z = wasm_f32x4_splat(0);
  v128_t a00 = z, a01 = z, a10 = z, a11 = z, a20 = z, a21 = z, a30 = z, a31 = z;
  for (i32 i = 0; i < k; i += 4) {
    v128_t p = ld(x0 + i), q = ld(x1 + i);
    v128_t v0 = ld(w0 + i), v1 = ld(w1 + i), v2 = ld(w2 + i), v3 = ld(w3 + i);
    a00 = madd(a00, v0, p);
    a01 = madd(a01, v0, q);
    a10 = madd(a10, v1, p);
    a11 = madd(a11, v1, q);
    a20 = madd(a20, v2, p);
    a21 = madd(a21, v2, q);
    a30 = madd(a30, v3, p);
    a31 = madd(a31, v3, q);
  }
  o[0] = hsum(a00);
  o[1] = hsum(a01);
  o[2] = hsum(a10);
  o[3] = hsum(a11);
  o[4] = hsum(a20);
  o[5] = hsum(a21);
  o[6] = hsum(a30);
  o[7] = hsum(a31);
}

// Token rows per block of the batched path: their x rows stay in L2 while the weight tiles
// stream past them.
#define TOKEN_BLOCK 64

// y[m][n'] (=, +=, swiglu, geglu) x[m][k] · W[n][k]ᵀ (+ bias). Rows split across threads in
// multiples of 4. Record: x, m, k, w, n, fmt, scales, gs, bias, y, epilogue, scratch, stride,
// xq (GGML weights: x as OP_QUANTIZE wrote it, or 0).
static void op_matmul(const i32* a, i32 tid, i32 nth) {
  const float* x = (const float*)a[1];
  i32 m = a[2], k = a[3];
  const u32* w = (const u32*)a[4];
  i32 n = a[5], fmt = a[6];
  const float* scales = (const float*)a[7];
  i32 gs = a[8];
  const float* bias = (const float*)a[9];
  float* y = (float*)a[10];
  i32 ep = a[11];
  float* scratch = (float*)(a[12] + tid * a[13]);
  i32 lo, hi;
  split(n, 4, tid, nth, &lo, &hi);
  if (fmt >= WF_GGML_FIRST) {
    ggml_matmul(x, (const uint8_t*)a[14], m, k, (const uint8_t*)w, n, fmt, lo, hi,
                (uint8_t*)scratch, y, ep, bias);
    return;
  }
  float o[8];
  if (m == 1) {
    // int8 decode: x to int16 once per thread (its own scratch), then integer dot products.
    int16_t* xq = 0;
    float* xs = 0;
    if (fmt == WF_INT8 && gs % 16 == 0 && lo < hi) {
      xq = (int16_t*)scratch;
      xs = scratch + (k + 1) / 2;
      quantize_x16(x, k, gs, xq, xs);
    }
    i32 j = lo;
    for (; j + 4 <= hi; j += 4) {
      if (fmt == WF_F32) dot4_f32((const float*)w + (long)j * k, k, x, o);
      else if (fmt == WF_F16) dot4_f16((const uint16_t*)w + (long)j * k, k, x, o);
      else {
        const int8_t* p = (const int8_t*)w + (long)j * k;
        const float* s = scales + (long)j * (k / gs);
        if (xq) {
          dot2_i8x16(p, s, k, gs, xq, xs, o);
          dot2_i8x16(p + 2 * (long)k, s + 2 * (k / gs), k, gs, xq, xs, o + 2);
        } else {
          dot2_i8(p, s, k, gs, x, o);
          dot2_i8(p + 2 * (long)k, s + 2 * (k / gs), k, gs, x, o + 2);
        }
      }
      if (ep >= EP_SWIGLU) {
        epilogue_glu(y, n, ep, bias, 0, j, o[0], o[1]);
        epilogue_glu(y, n, ep, bias, 0, j + 2, o[2], o[3]);
      } else {
        for (i32 r = 0; r < 4; r++) epilogue_store(y, n, ep, bias, 0, j + r, o[r]);
      }
    }
    for (; j < hi; j++) {
      if (ep >= EP_SWIGLU) {
        float g = dot1(w, fmt, k, scales, gs, j, x);
        float u = dot1(w, fmt, k, scales, gs, j + 1, x);
        epilogue_glu(y, n, ep, bias, 0, j, g, u);
        j++;
      } else {
        epilogue_store(y, n, ep, bias, 0, j, dot1(w, fmt, k, scales, gs, j, x));
      }
    }
    return;
  }
  // Batched: decode a 4-row weight tile to f32 once per token block, then 4×2 register tiles.
  for (i32 t0 = 0; t0 < m; t0 += TOKEN_BLOCK) {
    i32 t1 = t0 + TOKEN_BLOCK < m ? t0 + TOKEN_BLOCK : m;
    for (i32 j = lo; j < hi; j += 4) {
      i32 rows = hi - j < 4 ? hi - j : 4;
      const float* wt;
      if (fmt == WF_F32 && rows == 4) {
        wt = (const float*)w + (long)j * k;
      } else {
        for (i32 r = 0; r < 4; r++) {
          if (r < rows) decode_row(w, fmt, k, scales, gs, j + r, scratch + r * k);
          else for (i32 e = 0; e < k; e++) scratch[r * k + e] = 0.0f;
        }
        wt = scratch;
      }
      for (i32 i = t0; i < t1; i += 2) {
        const float* x0 = x + (long)i * k;
        const float* x1 = i + 1 < t1 ? x0 + k : x0;
        tile4x2(wt, x0, x1, k, o);
        i32 nt = i + 1 < t1 ? 2 : 1;
        for (i32 u = 0; u < nt; u++) {
          if (ep >= EP_SWIGLU) {
            for (i32 r = 0; r + 1 < rows; r += 2)
              epilogue_glu(y, n, ep, bias, i + u, j + r, o[r * 2 + u], o[(r + 1) * 2 + u]);
          } else {
            for (i32 r = 0; r < rows; r++) epilogue_store(y, n, ep, bias, i + u, j + r, o[r * 2 + u]);
          }
        }
      }
    }
  }
}

// x[m][k] quantized to 8 bits per block of 32 for the GGML matmuls that read it (every thread
// then reads the same rows). Record: x, m, k, out.
static void op_quantize(const i32* a, i32 tid, i32 nth) {
  ggml_quantize_x((const float*)a[1], a[2], a[3], (uint8_t*)a[4], tid, nth);
}

// RMSNorm: y[i] = x[src(i)] / sqrt(mean(x²) + eps) · weight, or with `add`, y[i] += that (a
// sandwich norm's residual add). Record: x, m, h, weight, eps (f32 bits), y, rowIndex (0:
// identity), add.
static void op_rmsnorm(const i32* a, i32 tid, i32 nth) {
  const float* x = (const float*)a[1];
  i32 m = a[2], h = a[3];
  const float* wt = (const float*)a[4];
  float eps = bits_f32((u32)a[5]);
  float* y = (float*)a[6];
  const i32* rows = (const i32*)a[7];
  i32 add = a[8];
  i32 lo, hi;
  split(m, 1, tid, nth, &lo, &hi);
  for (i32 i = lo; i < hi; i++) {
    const float* src = x + (long)(rows ? rows[i] : i) * h;
    float* dst = y + (long)i * h;
    v128_t s = wasm_f32x4_splat(0);
    for (i32 t = 0; t < h; t += 4) {
      v128_t v = ld(src + t);
      s = madd(s, v, v);
    }
    float inv = 1.0f / __builtin_sqrtf(hsum(s) / (float)h + eps);
    v128_t vi = wasm_f32x4_splat(inv);
    if (add) {
      for (i32 t = 0; t < h; t += 4)
        wasm_v128_store(dst + t, wasm_f32x4_add(ld(dst + t), wasm_f32x4_mul(wasm_f32x4_mul(
                                                                 ld(src + t), vi), ld(wt + t))));
      continue;
    }
    for (i32 t = 0; t < h; t += 4)
      wasm_v128_store(dst + t, wasm_f32x4_mul(wasm_f32x4_mul(ld(src + t), vi), ld(wt + t)));
  }
}

// Embedding gather: y[t] = decode(table[ids[t]]) (times `scale` when its f32 bits are not 0:
// Gemma's sqrt(hidden)). Record: ids, m, table, fmt, cols, scales, gs, y, scale.
static void op_embed(const i32* a, i32 tid, i32 nth) {
  const i32* ids = (const i32*)a[1];
  i32 m = a[2];
  const u32* w = (const u32*)a[3];
  i32 fmt = a[4], k = a[5];
  const float* scales = (const float*)a[6];
  i32 gs = a[7];
  float* y = (float*)a[8];
  u32 scaleBits = (u32)a[9];
  i32 lo, hi;
  split(m, 1, tid, nth, &lo, &hi);
  for (i32 t = lo; t < hi; t++) {
    float* row = y + (long)t * k;
    decode_row(w, fmt, k, scales, gs, ids[t], row);
    if (scaleBits != 0) {
      v128_t sv = wasm_f32x4_splat(bits_f32(scaleBits));
      for (i32 e = 0; e < k; e += 4) wasm_v128_store(row + e, wasm_f32x4_mul(ld(row + e), sv));
    }
  }
}

// Streaming read of [p, p + bytes): the memory-speed ceiling every kernel is measured against.
// Record: p, bytes (multiple of 128 per thread share), out (one f32 per thread).
static void op_stream(const i32* a, i32 tid, i32 nth) {
  const uint8_t* p = (const uint8_t*)a[1];
  i32 bytes = a[2];
  float* out = (float*)a[3];
  i32 lo, hi;
  split(bytes, 128, tid, nth, &lo, &hi);
  v128_t z = wasm_i32x4_splat(0);
  v128_t s0 = z, s1 = z, s2 = z, s3 = z, s4 = z, s5 = z, s6 = z, s7 = z;
  for (i32 i = lo; i + 128 <= hi; i += 128) {
    s0 = wasm_i32x4_add(s0, ld(p + i));
    s1 = wasm_i32x4_add(s1, ld(p + i + 16));
    s2 = wasm_i32x4_add(s2, ld(p + i + 32));
    s3 = wasm_i32x4_add(s3, ld(p + i + 48));
    s4 = wasm_i32x4_add(s4, ld(p + i + 64));
    s5 = wasm_i32x4_add(s5, ld(p + i + 80));
    s6 = wasm_i32x4_add(s6, ld(p + i + 96));
    s7 = wasm_i32x4_add(s7, ld(p + i + 112));
  }
  v128_t s = wasm_i32x4_add(wasm_i32x4_add(wasm_i32x4_add(s0, s1), wasm_i32x4_add(s2, s3)),
                            wasm_i32x4_add(wasm_i32x4_add(s4, s5), wasm_i32x4_add(s6, s7)));
  out[tid] = (float)(wasm_i32x4_extract_lane(s, 0) ^ wasm_i32x4_extract_lane(s, 3));
}

// ---------------------------------------------------------------------------------------------
// Thread runtime. The control block (i32 words, in shared memory):

enum {
  C_GEN = 0,       // bumped by thread 0 to start a program
  C_NTH = 1,       // threads taking part (thread 0 included)
  C_PROG = 2,      // program address
  C_NOPS = 3,      // op records in it
  C_DONE = 4,      // workers finished with the current program
  C_BCOUNT = 5,    // threads arrived at the current barrier
  C_BGEN = 6,      // barrier generation
  C_QUIT = 7,      // workers return when set
  C_SLEEPERS = 8,  // threads in a timed wait inside a program (skip notify when 0)
  C_SPIN = 9,      // spin iterations before blocking
  C_ERROR = 10,    // set (by the TypeScript side) when a worker trapped: every wait gives up
  C_LOST = 11,     // wake-ups that did not arrive: found by a timed wait or a repeated notify
  C_PARKED = 12,   // workers parked (no timeout) on C_GEN between programs
  C_STARTED = 13,  // workers that took up the current program
  C_WAKEUPS = 14,  // blocking waits that returned, every thread (an idle pool adds none)
  C_WORDS = 16,
};

INLINE i32 aload(i32* p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
INLINE void astore(i32* p, i32 v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
INLINE i32 aadd(i32* p, i32 v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }

// The only two places that issue memory.atomic.wait32 and memory.atomic.notify, as calls, never
// inlined. V8 11.3 (Node 20) compiles these instructions wrongly in Liftoff, its baseline tier,
// when they sit in a loop: from the second iteration a wait returns at once or sleeps far past
// its timeout. A worker's kv_worker never returns, so it never leaves Liftoff (V8 has no
// on-stack replacement for wasm): an idle worker span at 100% of a core, and wake-ups looked
// lost. Behind a call, the instruction sits in a function of its own with no loop.
__attribute__((noinline)) static i32 atomic_wait(i32* p, i32 seen, int64_t timeout_ns) {
  return __builtin_wasm_memory_atomic_wait32(p, seen, timeout_ns);
}

__attribute__((noinline)) static i32 atomic_notify(i32* p) {
  return (i32)__builtin_wasm_memory_atomic_notify(p, 0x7fffffffu);
}

// A parked worker that has not taken up the current program although thread 0 woke it lost
// its wake-up: wake it again. Every timed wait inside a program calls this when it times out,
// so a lost wake-up costs one timeout of a waiting thread, never a hang.
static void rewake_parked(i32* ctrl) {
  if (aload(ctrl + C_PARKED) > 0 && aload(ctrl + C_STARTED) < aload(ctrl + C_NTH) - 1 &&
      atomic_notify(ctrl + C_GEN) > 0)
    aadd(ctrl + C_LOST, 1);
}

// Waits, inside a program, until *p != seen: spins first (the next op is usually microseconds
// away), then blocks with a timeout that doubles from 50 µs to 1 ms, re-checking the word and
// the parked workers at each.
static void wait_change(i32* ctrl, i32* p, i32 seen) {
  i32 spins = ctrl[C_SPIN];
  for (i32 i = 0; i < spins; i++)
    if (aload(p) != seen) return;
  int64_t timeout = 50000;
  while (aload(p) == seen && !aload(ctrl + C_ERROR)) {
    aadd(ctrl + C_SLEEPERS, 1);
    i32 r = atomic_wait(p, seen, timeout);
    aadd(ctrl + C_SLEEPERS, -1);
    aadd(ctrl + C_WAKEUPS, 1);
    if (r == 2) {
      if (aload(p) != seen) aadd(ctrl + C_LOST, 1);
      rewake_parked(ctrl);
    }
    if (timeout < 1000000) timeout *= 2;
  }
}

static void wake_all(i32* ctrl, i32* p) {
  if (aload(ctrl + C_SLEEPERS) > 0) atomic_notify(p);
}

// Waits, between programs, until thread 0 starts the next one (C_GEN != seen) or quits: spins,
// then blocks with no timeout, so an idle pool costs nothing. Thread 0 wakes the parked
// workers when it starts a program, and again (rewake_parked) while one has not taken it up.
static void park(i32* ctrl, i32 seen) {
  i32 spins = ctrl[C_SPIN];
  for (i32 i = 0; i < spins; i++)
    if (aload(ctrl + C_GEN) != seen) return;
  while (aload(ctrl + C_GEN) == seen && !aload(ctrl + C_ERROR)) {
    aadd(ctrl + C_PARKED, 1);
    atomic_wait(ctrl + C_GEN, seen, -1);
    aadd(ctrl + C_PARKED, -1);
    aadd(ctrl + C_WAKEUPS, 1);
  }
}

static void barrier(i32* ctrl, i32 nth) {
  if (nth == 1) return;
  i32 gen = aload(ctrl + C_BGEN);
  if (aadd(ctrl + C_BCOUNT, 1) == nth - 1) {
    astore(ctrl + C_BCOUNT, 0);
    aadd(ctrl + C_BGEN, 1);
    wake_all(ctrl, ctrl + C_BGEN);
  } else {
    wait_change(ctrl, ctrl + C_BGEN, gen);
  }
}

static void run_program(i32* ctrl, i32 tid) {
  i32 nth = ctrl[C_NTH];
  const i32* prog = (const i32*)ctrl[C_PROG];
  i32 nops = ctrl[C_NOPS];
  for (i32 o = 0; o < nops; o++) {
    const i32* a = prog + o * OP_WORDS;
    u32 code = (u32)a[0];
    switch (code & ~OP_BARRIER) {
      case OP_MATMUL: op_matmul(a, tid, nth); break;
      case OP_RMSNORM: op_rmsnorm(a, tid, nth); break;
      case OP_EMBED: op_embed(a, tid, nth); break;
      case OP_ROPE_KV: op_rope_kv(a, tid, nth); break;
      case OP_ATTENTION: op_attention(a, tid, nth); break;
      case OP_STREAM: op_stream(a, tid, nth); break;
      case OP_KEY_SHIFT: op_key_shift(a, tid, nth); break;
      case OP_QUANTIZE: op_quantize(a, tid, nth); break;
      default: break;
    }
    if (code & OP_BARRIER) {
      barrier(ctrl, nth);
      if (aload(ctrl + C_ERROR)) return;
    }
  }
}

// Thread 0: starts the program on the workers, runs its own share, and returns when every
// thread is done (0), or when a worker trapped (1). The caller has written C_PROG and C_NOPS.
EXPORT(kv_run) i32 kv_run(i32* ctrl) {
  i32 nth = ctrl[C_NTH];
  astore(ctrl + C_DONE, 0);
  if (nth > 1) {
    astore(ctrl + C_STARTED, 0);
    aadd(ctrl + C_GEN, 1);
    if (aload(ctrl + C_PARKED) > 0) atomic_notify(ctrl + C_GEN);
  }
  run_program(ctrl, 0);
  for (;;) {
    i32 done = aload(ctrl + C_DONE);
    if (done == nth - 1 || aload(ctrl + C_ERROR)) break;
    wait_change(ctrl, ctrl + C_DONE, done);
  }
  return aload(ctrl + C_ERROR);
}

// Worker `tid` (1..n-1): runs each program thread 0 starts after generation `seen` until
// C_QUIT is set. (`seen` comes from the pool's creation, so a worker that starts late still
// runs a program started before it got here.)
EXPORT(kv_worker) void kv_worker(i32* ctrl, i32 tid, i32 seen) {
  for (;;) {
    park(ctrl, seen);
    seen = aload(ctrl + C_GEN);
    if (aload(ctrl + C_QUIT) || aload(ctrl + C_ERROR)) return;
    aadd(ctrl + C_STARTED, 1);
    run_program(ctrl, tid);
    aadd(ctrl + C_DONE, 1);
    wake_all(ctrl, ctrl + C_DONE);
  }
}

EXPORT(kv_control_words) i32 kv_control_words(void) { return C_WORDS; }
EXPORT(kv_op_words) i32 kv_op_words(void) { return OP_WORDS; }
