// ggml's reference quantizers (quantize_row_<type>_ref of ggml-quants.c, no importance matrix)
// as a filter: reads N float32 values from stdin, writes the blocks to stdout.
//   quantize_ref Q4_K 4096 < in.f32 > out.bin
// make_fixtures.py compiles it with ggml-quants.c and -ffp-contract=off, so every float
// operation rounds as the C source says (no fused multiply-adds): the semantics the TypeScript
// transcription follows.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"
#include "ggml-quants.h"

// ggml-quants.c references these outside the reference quantizers; nothing here calls them.
void ggml_abort(const char *file, int line, const char *fmt, ...) {
  fprintf(stderr, "ggml_abort at %s:%d (%s)\n", file, line, fmt);
  abort();
}
size_t ggml_row_size(enum ggml_type type, int64_t ne) { (void)type; (void)ne; abort(); }
const char *ggml_type_name(enum ggml_type type) { (void)type; return "?"; }
size_t ggml_type_size(enum ggml_type type) { (void)type; abort(); }

int main(int argc, char **argv) {
  if (argc != 3) return 1;
  const char *t = argv[1];
  const long n = atol(argv[2]);
  float *x = malloc(n * sizeof(float));
  unsigned char *y = malloc(n * 2);
  if (fread(x, sizeof(float), n, stdin) != (size_t)n) return 2;
  size_t bytes = 0;
#define CASE(name, fn, bs, sz) \
  if (!strcmp(t, #name)) { quantize_row_##fn##_ref(x, (void *)y, n); bytes = n / bs * sz; } else
  CASE(Q4_0, q4_0, 32, 18) CASE(Q4_1, q4_1, 32, 20) CASE(Q5_0, q5_0, 32, 22)
  CASE(Q5_1, q5_1, 32, 24) CASE(Q8_0, q8_0, 32, 34) CASE(Q2_K, q2_K, 256, 84)
  CASE(Q3_K, q3_K, 256, 110) CASE(Q4_K, q4_K, 256, 144) CASE(Q5_K, q5_K, 256, 176)
  CASE(Q6_K, q6_K, 256, 210) CASE(IQ4_NL, iq4_nl, 32, 18) CASE(MXFP4, mxfp4, 32, 17) return 3;
  fwrite(y, 1, bytes, stdout);
  return 0;
}
