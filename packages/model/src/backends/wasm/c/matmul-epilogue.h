// The matmul epilogue every matrix kernel (kernels.c's dense rows, ggml-matmul.c's blocks)
// writes its results through: store, add to a residual, or a gated unit (SwiGLU, GeGLU with
// GELU's tanh approximation, or gpt-oss's clamped SwiGLU) of an interleaved gate/up row pair, each with an optional bias. Static inline, so each kernel's loop keeps it inline.

#ifndef KVASIR_MATMUL_EPILOGUE_H
#define KVASIR_MATMUL_EPILOGUE_H

#include "common.h"

// The TypeScript twin is wasm-program.ts's EpilogueCode.
// Codes from EP_SWIGLU up are gated units.
enum { EP_STORE = 0, EP_RESIDUAL = 1, EP_SWIGLU = 2, EP_GEGLU = 3, EP_SWIGLU_OAI = 4 };

INLINE float silu(float v) { return v / (1.0f + expf_(-v)); }

// GELU, tanh approximation (gelu_pytorch_tanh): tanh(z) = 1 - 2 / (e^2z + 1), no libm here.
INLINE float gelu_tanh(float v) {
  float z = 0.7978845608028654f * v * (1.0f + 0.044715f * v * v);
  return 0.5f * v * (2.0f - 2.0f / (expf_(2.0f * z) + 1.0f));
}

// gpt-oss's clamped SwiGLU (ggml's swiglu_oai, alpha 1.702, limit 7).
INLINE float swiglu_oai(float g, float u) {
  float x = g < 7.0f ? g : 7.0f;
  float y = u < -7.0f ? -7.0f : (u > 7.0f ? 7.0f : u);
  return x / (1.0f + expf_(-1.702f * x)) * (y + 1.0f);
}

// Result v of weight row j for token row i under EP_STORE or EP_RESIDUAL (y has n columns).
INLINE void epilogue_store(float* y, i32 n, i32 ep, const float* bias, i32 i, i32 j, float v) {
  if (bias) v += bias[j];
  if (ep == EP_RESIDUAL) y[(long)i * n + j] += v;
  else y[(long)i * n + j] = v;
}

// The gated unit `ep` (SwiGLU or GeGLU) of gate row j and up row j + 1 (j even) for token row
// i: y has n / 2 columns.
INLINE void epilogue_glu(float* y, i32 n, i32 ep, const float* bias, i32 i, i32 j, float g,
                         float u) {
  if (bias) {
    g += bias[j];
    u += bias[j + 1];
  }
  y[(long)i * (n / 2) + j / 2] = ep == EP_SWIGLU_OAI ? swiglu_oai(g, u)
                                 : (ep == EP_GEGLU ? gelu_tanh(g) : silu(g)) * u;
}

// Either, by `ep`: for a gated unit, v and u are gate row j and up row j + 1; otherwise u is
// unused.
INLINE void epilogue(float* y, i32 n, i32 ep, const float* bias, i32 i, i32 j, float v,
                     float u) {
  if (ep >= EP_SWIGLU) epilogue_glu(y, n, ep, bias, i, j, v, u);
  else epilogue_store(y, n, ep, bias, i, j, v);
}

#endif
