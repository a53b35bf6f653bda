// RoPE with the KV cache write, and paged attention, over the cache layout every backend shares
// (@kvasir/attention-kernels' README): one buffer per layer, blocks of K and V slabs per KV head.

#include "common.h"

enum { KV_F32 = 0, KV_F16 = 1 };

// The cache word offset of a K (kv 0) or V (kv 1) row.
INLINE long kv_row(i32 slot, i32 h, i32 kv, i32 bs, i32 blockWords, i32 slabWords, i32 rowWords) {
  i32 b = slot / bs;
  return (long)b * blockWords + (long)(2 * h + kv) * slabWords + (long)(slot - b * bs) * rowWords;
}

static void store_kv_row(u32* dst, const float* src, i32 d, i32 kvfmt) {
  if (kvfmt == KV_F32) {
    float* f = (float*)dst;
    for (i32 e = 0; e < d; e += 4) wasm_v128_store(f + e, ld(src + e));
    return;
  }
  for (i32 e = 0; e < d; e += 2) dst[e / 2] = f32_to_f16(src[e]) | (f32_to_f16(src[e + 1]) << 16);
}

INLINE void rope_rows(float* x, i32 heads, i32 d, const float* c, const float* s) {
  i32 half = d / 2;
  for (i32 h = 0; h < heads; h++) {
    float* p = x + h * d;
    i32 i = 0;
    for (; i + 4 <= half; i += 4) {
      v128_t x0 = ld(p + i), x1 = ld(p + i + half), cv = ld(c + i), sv = ld(s + i);
      wasm_v128_store(p + i, wasm_f32x4_sub(wasm_f32x4_mul(x0, cv), wasm_f32x4_mul(x1, sv)));
      wasm_v128_store(p + i + half, wasm_f32x4_add(wasm_f32x4_mul(x1, cv), wasm_f32x4_mul(x0, sv)));
    }
    for (; i < half; i++) {
      float x0 = p[i], x1 = p[i + half];
      p[i] = x0 * c[i] - x1 * s[i];
      p[i + half] = x1 * c[i] + x0 * s[i];
    }
  }
}

// RoPE on q and k rows, then K and V into their cache slots (slot -1, or kvfmt -1 for formats
// the host writes: no write). Record: q,
// k, v, m, positions, slots, hq, hkv, d, cos, sin, cache, kvfmt, bs, blockWords, slabWords,
// rowWords.
void op_rope_kv(const i32* a, i32 tid, i32 nth) {
  float* q = (float*)a[1];
  float* k = (float*)a[2];
  const float* v = (const float*)a[3];
  i32 m = a[4];
  const i32* pos = (const i32*)a[5];
  const i32* slots = (const i32*)a[6];
  i32 hq = a[7], hkv = a[8], d = a[9];
  const float* cosT = (const float*)a[10];
  const float* sinT = (const float*)a[11];
  u32* cache = (u32*)a[12];
  i32 kvfmt = a[13], bs = a[14], bw = a[15], sw = a[16], rw = a[17];
  i32 lo, hi;
  split(m, 1, tid, nth, &lo, &hi);
  i32 half = d / 2;
  for (i32 t = lo; t < hi; t++) {
    const float* c = cosT + (long)pos[t] * half;
    const float* s = sinT + (long)pos[t] * half;
    rope_rows(q + (long)t * hq * d, hq, d, c, s);
    float* kt = k + (long)t * hkv * d;
    rope_rows(kt, hkv, d, c, s);
    i32 slot = slots[t];
    if (slot < 0 || kvfmt < 0) continue;
    for (i32 h = 0; h < hkv; h++) {
      store_kv_row(cache + kv_row(slot, h, 0, bs, bw, sw, rw), kt + h * d, d, kvfmt);
      store_kv_row(cache + kv_row(slot, h, 1, bs, bw, sw, rw), v + ((long)t * hkv + h) * d, d,
                   kvfmt);
    }
  }
}

INLINE float dot_kv(const float* q, const u32* row, i32 d, i32 kvfmt) {
  v128_t a = wasm_f32x4_splat(0), b = a;
  if (kvfmt == KV_F32) {
    const float* r = (const float*)row;
    for (i32 e = 0; e < d; e += 8) {
      a = madd(a, ld(q + e), ld(r + e));
      b = madd(b, ld(q + e + 4), ld(r + e + 4));
    }
  } else {
    const uint16_t* r = (const uint16_t*)row;
    for (i32 e = 0; e < d; e += 8) {
      v128_t h = ld(r + e);
      a = madd(a, ld(q + e), half_lo(h));
      b = madd(b, ld(q + e + 4), half_hi(h));
    }
  }
  return hsum(wasm_f32x4_add(a, b));
}

INLINE void axpy_kv(float* acc, float p, const u32* row, i32 d, i32 kvfmt) {
  v128_t pv = wasm_f32x4_splat(p);
  if (kvfmt == KV_F32) {
    const float* r = (const float*)row;
    for (i32 e = 0; e < d; e += 4) wasm_v128_store(acc + e, madd(ld(acc + e), pv, ld(r + e)));
  } else {
    const uint16_t* r = (const uint16_t*)row;
    for (i32 e = 0; e < d; e += 8) {
      v128_t h = ld(r + e);
      wasm_v128_store(acc + e, madd(ld(acc + e), pv, half_lo(h)));
      wasm_v128_store(acc + e + 4, madd(ld(acc + e + 4), pv, half_hi(h)));
    }
  }
}

// Causal paged attention for every (token, kv head): token i of a sequence sees cache
// positions [0, contextLen - queryLen + i]. Work items split across threads. Record: q, out,
// m, tokSeq, queryStarts, queryLens, contextLens, blockTables, maxBlocks, hq, hkv, d, cache,
// kvfmt, bs, blockWords, slabWords, rowWords, scale (f32 bits), scratch, stride.
void op_attention(const i32* a, i32 tid, i32 nth) {
  const float* q = (const float*)a[1];
  float* out = (float*)a[2];
  i32 m = a[3];
  const i32* tokSeq = (const i32*)a[4];
  const i32* qStart = (const i32*)a[5];
  const i32* qLen = (const i32*)a[6];
  const i32* ctxLen = (const i32*)a[7];
  const i32* tables = (const i32*)a[8];
  i32 maxBlocks = a[9], hq = a[10], hkv = a[11], d = a[12];
  const u32* cache = (const u32*)a[13];
  i32 kvfmt = a[14], bs = a[15], bw = a[16], sw = a[17], rw = a[18];
  float scale = bits_f32((u32)a[19]);
  float* scores = (float*)(a[20] + tid * a[21]);
  i32 group = hq / hkv;
  i32 lo, hi;
  split(m * hkv, 1, tid, nth, &lo, &hi);
  for (i32 item = lo; item < hi; item++) {
    i32 t = item / hkv, kvh = item % hkv;
    i32 s = tokSeq[t];
    i32 visible = ctxLen[s] - qLen[s] + (t - qStart[s]) + 1;
    const i32* table = tables + (long)s * maxBlocks;
    float* acc = scores + visible + ((4 - (visible & 3)) & 3);
    for (i32 g = 0; g < group; g++) {
      i32 h = kvh * group + g;
      const float* qh = q + ((long)t * hq + h) * d;
      float mx = bits_f32(0xff800000u);
      for (i32 j0 = 0, b = 0; j0 < visible; j0 += bs, b++) {
        const u32* blk = cache + (long)table[b] * bw + (long)(2 * kvh) * sw;
        i32 n = visible - j0 < bs ? visible - j0 : bs;
        for (i32 r = 0; r < n; r++) {
          float sc = dot_kv(qh, blk + (long)r * rw, d, kvfmt) * scale;
          scores[j0 + r] = sc;
          if (sc > mx) mx = sc;
        }
      }
      float sum = 0.0f;
      for (i32 j = 0; j < visible; j++) {
        float p = expf_(scores[j] - mx);
        scores[j] = p;
        sum += p;
      }
      for (i32 e = 0; e < d; e += 4) wasm_v128_store(acc + e, wasm_f32x4_splat(0));
      for (i32 j0 = 0, b = 0; j0 < visible; j0 += bs, b++) {
        const u32* blk = cache + (long)table[b] * bw + (long)(2 * kvh + 1) * sw;
        i32 n = visible - j0 < bs ? visible - j0 : bs;
        for (i32 r = 0; r < n; r++) axpy_kv(acc, scores[j0 + r], blk + (long)r * rw, d, kvfmt);
      }
      float* o = out + ((long)t * hq + h) * d;
      v128_t inv = wasm_f32x4_splat(1.0f / sum);
      for (i32 e = 0; e < d; e += 4) wasm_v128_store(o + e, wasm_f32x4_mul(ld(acc + e), inv));
    }
  }
}
