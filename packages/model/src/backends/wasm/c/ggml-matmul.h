// GGML block weights in the wasm kernels: the format codes (after kernels.c's dense WF_F32,
// WF_F16, WF_INT8; wasm-program.ts's WeightCode is their TypeScript twin) and the entry points
// kernels.c dispatches to.

#ifndef KVASIR_GGML_MATMUL_H
#define KVASIR_GGML_MATMUL_H

#include <stdint.h>

enum {
  WF_GGML_FIRST = 3,
  WF_Q4_0 = 3,
  WF_Q4_1 = 4,
  WF_Q5_0 = 5,
  WF_Q5_1 = 6,
  WF_Q8_0 = 7,
  WF_Q2_K = 8,
  WF_Q3_K = 9,
  WF_Q4_K = 10,
  WF_Q5_K = 11,
  WF_Q6_K = 12,
  WF_IQ4_NL = 13,
  WF_MXFP4 = 14,
  WF_GGML_END = 15,
};

// Scratch floats per input column ggml_matmul needs per thread (k = the matrix's columns).
#define GGML_SCRATCH_FLOATS_PER_COL 11

// y (=, +=, swiglu, geglu) x[m][k] · W[lo..hi)[k]ᵀ for a GGML block matrix `w` (rows of k / blockSize
// blocks, back to back). `xq`: x's rows as ggml_quantize_x wrote them, or 0 (each thread then
// quantizes x itself). Results go through matmul-epilogue.h. `scratch` holds
// GGML_SCRATCH_FLOATS_PER_COL · k floats of this thread's own.
void ggml_matmul(const float* x, const uint8_t* xq, int32_t m, int32_t k, const uint8_t* w,
                 int32_t n, int32_t fmt, int32_t lo, int32_t hi, uint8_t* scratch, float* y,
                 int32_t ep, const float* bias);

// Thread tid's share of x[m][k] quantized for ggml_matmul into `out` (int8-dot.h's rows of
// XQ_ROW_BYTES(k) bytes).
void ggml_quantize_x(const float* x, int32_t m, int32_t k, uint8_t* out, int32_t tid,
                     int32_t nth);

// Row `r` of a GGML block matrix decoded to f32 (the embedding gather).
void ggml_decode_row(const uint8_t* w, int32_t fmt, int32_t k, int32_t r, float* out);

#endif
