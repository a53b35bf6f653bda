// The machine's streaming-read bandwidth from native code, the ceiling the wasm backend's own
// stream kernel is compared with: each of N threads sums its own slice (first-touched by it)
// with 128-bit loads, best of 10 passes. Built and run by bench/wasm.ts when clang is present.
// Usage: stream <threads> <MiB>; prints GB/s.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <emmintrin.h>

static int nth;
static size_t bytes;
static uint8_t* buf;
static pthread_barrier_t bar;
static double best;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void* run(void* arg) {
  long tid = (long)arg;
  size_t per = bytes / nth, lo = tid * per, hi = lo + per;
  memset(buf + lo, 1, per);
  __m128i s0 = _mm_setzero_si128(), s1 = s0, s2 = s0, s3 = s0;
  for (int r = 0; r < 10; r++) {
    pthread_barrier_wait(&bar);
    double t0 = now();
    for (size_t i = lo; i < hi; i += 64) {
      s0 = _mm_add_epi32(s0, _mm_load_si128((const __m128i*)(buf + i)));
      s1 = _mm_add_epi32(s1, _mm_load_si128((const __m128i*)(buf + i + 16)));
      s2 = _mm_add_epi32(s2, _mm_load_si128((const __m128i*)(buf + i + 32)));
      s3 = _mm_add_epi32(s3, _mm_load_si128((const __m128i*)(buf + i + 48)));
    }
    pthread_barrier_wait(&bar);
    double gbps = bytes / (now() - t0) / 1e9;
    if (tid == 0 && gbps > best) best = gbps;
  }
  s0 = _mm_add_epi32(_mm_add_epi32(s0, s1), _mm_add_epi32(s2, s3));
  return (void*)(intptr_t)_mm_cvtsi128_si32(s0);
}

int main(int argc, char** argv) {
  nth = argc > 1 ? atoi(argv[1]) : 1;
  bytes = (size_t)(argc > 2 ? atoi(argv[2]) : 256) << 20;
  buf = aligned_alloc(64, bytes);
  pthread_barrier_init(&bar, NULL, nth);
  pthread_t t[256];
  for (long i = 0; i < nth; i++) pthread_create(&t[i], NULL, run, (void*)i);
  for (int i = 0; i < nth; i++) pthread_join(t[i], NULL);
  printf("%.3f\n", best);
  return 0;
}
