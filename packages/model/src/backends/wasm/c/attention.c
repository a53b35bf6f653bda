// RoPE with the KV cache write, and paged attention, over the cache layout every backend shares
// (@kvasir/attention-kernels' README): one buffer per layer, blocks of K and V slabs per KV head.

#include "common.h"
#include "kv-formats.h"

// The first word of the slab holding slot's K (kv 0) or V (kv 1) row of KV head h.
INLINE long kv_slab(i32 slot, i32 h, i32 kv, i32 bs, i32 blockWords, i32 slabWords) {
  return (long)(slot / bs) * blockWords + (long)(2 * h + kv) * slabWords;
}

// Rotate-half RoPE over the first 2 * half dims of each head's row of d (partial rotary leaves
// the rest), the rotated dims then multiplied by qs (1 for K; LongRoPE's attention factor
// squared for Q, which multiplies 1.0 exactly when there is none).
INLINE void rope_rows(float* x, i32 heads, i32 d, i32 half, const float* c, const float* s,
                      float qs) {
  v128_t q4 = wasm_f32x4_splat(qs);
  for (i32 h = 0; h < heads; h++) {
    float* p = x + h * d;
    i32 i = 0;
    for (; i + 4 <= half; i += 4) {
      v128_t x0 = ld(p + i), x1 = ld(p + i + half), cv = ld(c + i), sv = ld(s + i);
      v128_t y0 = wasm_f32x4_sub(wasm_f32x4_mul(x0, cv), wasm_f32x4_mul(x1, sv));
      v128_t y1 = wasm_f32x4_add(wasm_f32x4_mul(x1, cv), wasm_f32x4_mul(x0, sv));
      wasm_v128_store(p + i, wasm_f32x4_mul(y0, q4));
      wasm_v128_store(p + i + half, wasm_f32x4_mul(y1, q4));
    }
    for (; i < half; i++) {
      float x0 = p[i], x1 = p[i + half];
      p[i] = (x0 * c[i] - x1 * s[i]) * qs;
      p[i + half] = (x1 * c[i] + x0 * s[i]) * qs;
    }
  }
}

// RoPE on q and k rows, then K and V into their cache slots in the cache's format (slot -1: no
// write). Record: q, k, v, m, positions, slots, hq, hkv, d, cos, sin, cache, kvfmt, bs,
// blockWords, slabWords, nope (1: a NoPE layer, q and k are not rotated), rot (the rotated
// leading dims of a head; the tables hold rot / 2 pairs a position), qscale (f32 bits: what
// q's rotated dims are multiplied by).
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
  i32 kvfmt = a[13], bs = a[14], bw = a[15], sw = a[16], nope = a[17];
  i32 half = a[18] / 2;
  float qs = bits_f32(a[19]);
  i32 lo, hi;
  split(m, 1, tid, nth, &lo, &hi);
  for (i32 t = lo; t < hi; t++) {
    float* kt = k + (long)t * hkv * d;
    if (!nope) {
      const float* c = cosT + (long)pos[t] * half;
      const float* s = sinT + (long)pos[t] * half;
      rope_rows(q + (long)t * hq * d, hq, d, half, c, s, qs);
      rope_rows(kt, hkv, d, half, c, s, 1.0f);
    }
    i32 slot = slots[t];
    if (slot < 0) continue;
    i32 row = slot % bs;
    for (i32 h = 0; h < hkv; h++) {
      kv_store_row(cache + kv_slab(slot, h, 0, bs, bw, sw), row, kt + h * d, d, bs, kvfmt);
      kv_store_row(cache + kv_slab(slot, h, 1, bs, bw, sw), row, v + ((long)t * hkv + h) * d, d,
                   bs, kvfmt);
    }
  }
}

INLINE float dot_f32(const float* q, const float* r, i32 d) {
  v128_t a = wasm_f32x4_splat(0), b = a;
  for (i32 e = 0; e < d; e += 8) {
    a = madd(a, ld(q + e), ld(r + e));
    b = madd(b, ld(q + e + 4), ld(r + e + 4));
  }
  return hsum(wasm_f32x4_add(a, b));
}

// expf_ (common.h) on four arguments x <= 0 (softmax's score - max): the same reduction and
// polynomial, lane by lane.
INLINE v128_t softmax_exp4(v128_t x) {
#define C(v) wasm_f32x4_const_splat(v)
  v128_t n = wasm_f32x4_nearest(wasm_f32x4_mul(x, C(1.44269504088896341f)));
  v128_t r = wasm_f32x4_sub(wasm_f32x4_sub(x, wasm_f32x4_mul(n, C(0.693145751953125f))),
                            wasm_f32x4_mul(n, C(1.428606765330187e-06f)));
  v128_t p = wasm_f32x4_add(C(1.3888889e-3f), wasm_f32x4_mul(r, C(1.9841270e-4f)));
  p = wasm_f32x4_add(C(8.3333338e-3f), wasm_f32x4_mul(r, p));
  p = wasm_f32x4_add(C(4.1666668e-2f), wasm_f32x4_mul(r, p));
  p = wasm_f32x4_add(C(1.6666667e-1f), wasm_f32x4_mul(r, p));
  p = wasm_f32x4_add(C(0.5f), wasm_f32x4_mul(r, p));
  p = wasm_f32x4_add(C(1.0f), wasm_f32x4_mul(r, p));
  p = wasm_f32x4_add(C(1.0f), wasm_f32x4_mul(r, p));
#undef C
  v128_t e = wasm_i32x4_trunc_sat_f32x4(n);
  // Below 2^-125 the scale goes in two steps (2^(e + 100), then 2^-100), as in expf_.
  v128_t deep = wasm_i32x4_lt(e, wasm_i32x4_const_splat(-125));
  v128_t e1 = wasm_v128_bitselect(wasm_i32x4_add(e, wasm_i32x4_const_splat(100)), e, deep);
  v128_t y = wasm_f32x4_mul(p, wasm_i32x4_shl(wasm_i32x4_add(e1, wasm_i32x4_const_splat(127)), 23));
  y = wasm_v128_bitselect(wasm_f32x4_mul(y, wasm_f32x4_const_splat(7.888609052210118e-31f)), y, deep);
  return wasm_v128_andnot(y, wasm_f32x4_lt(x, wasm_f32x4_const_splat(-103.0f)));
}

// int8 codes against a query rounded to int16: i16 × i16 pair products summed in i32 (d ≤
// KV_MAX_HEAD_DIM keeps d · 127 · 32767 below 2^31).
INLINE float dot_i8_q16(const int8_t* codes, const int16_t* q16, i32 d) {
  v128_t acc = wasm_i32x4_splat(0);
  i32 e = 0;
  for (; e + 16 <= d; e += 16) {
    v128_t b = ld(codes + e);
    acc = wasm_i32x4_add(acc, wasm_i32x4_dot_i16x8(wasm_i16x8_extend_low_i8x16(b), ld(q16 + e)));
    acc = wasm_i32x4_add(acc,
                         wasm_i32x4_dot_i16x8(wasm_i16x8_extend_high_i8x16(b), ld(q16 + e + 8)));
  }
  if (e < d) {  // d is a multiple of 8
    v128_t b = wasm_i16x8_extend_low_i8x16(wasm_v128_load64_zero(codes + e));
    acc = wasm_i32x4_add(acc, wasm_i32x4_dot_i16x8(b, ld(q16 + e)));
  }
  return (float)(wasm_i32x4_extract_lane(acc, 0) + wasm_i32x4_extract_lane(acc, 1) +
                 wasm_i32x4_extract_lane(acc, 2) + wasm_i32x4_extract_lane(acc, 3));
}

INLINE void axpy_f32(float* acc, float p, const float* r, i32 d) {
  v128_t pv = wasm_f32x4_splat(p);
  for (i32 e = 0; e < d; e += 4) wasm_v128_store(acc + e, madd(ld(acc + e), pv, ld(r + e)));
}

// One op's arguments, unpacked once per thread.
typedef struct {
  const float* q;
  float* out;
  const i32 *tokSeq, *qStart, *qLen, *ctxLen, *tables;
  i32 maxBlocks, hq, hkv, d, bs, bw, sw, sp, group, parts, window;
  const u32* cache;
  float scale;
  float *scores, *qr, *acc, *buf;
  float* mass;
  const i32 *massOff, *massQ;
  const float* sinks;  // one logit per query head, or 0
} Attention;

// One item: a (token, kv head) and a share of its group's query heads (all of them unless there
// are fewer (token, kv head) pairs than threads). Always inlined with a constant `kvfmt`, so
// every format gets its own loops with the row loader's format tests folded away.
INLINE void attend(const Attention* A, i32 item, i32 kvfmt) {
  const float* q = A->q;
  float* out = A->out;
  const i32* tokSeq = A->tokSeq;
  const i32* qStart = A->qStart;
  const i32* qLen = A->qLen;
  const i32* ctxLen = A->ctxLen;
  const i32* tables = A->tables;
  i32 maxBlocks = A->maxBlocks, hq = A->hq, hkv = A->hkv, d = A->d;
  i32 bs = A->bs, bw = A->bw, sw = A->sw, sp = A->sp, group = A->group;
  const u32* cache = A->cache;
  float scale = A->scale;
  float *scores = A->scores, *qr = A->qr, *acc = A->acc, *buf = A->buf;
  float* mass = A->mass;
  const i32* massOff = A->massOff;
  const i32* massQ = A->massQ;
  i32 rot = kv_rotation(kvfmt);
  i32 part = item % A->parts;
  item /= A->parts;
  i32 t = item / hkv, kvh = item % hkv;
  i32 g0 = part * group / A->parts, g1 = (part + 1) * group / A->parts;
  i32 s = tokSeq[t];
  i32 local = t - qStart[s];
  i32 visible = ctxLen[s] - qLen[s] + local + 1;
  // A sliding-window layer's query sees [lo, visible): blocks before lo's are never read.
  i32 lo = A->window > 0 && visible > A->window ? visible - A->window : 0;
  const i32* table = tables + (long)s * maxBlocks;
  const float* qh = q + ((long)t * hq + (long)kvh * group) * d;
  if (rot) {
    // H·q / R: the rotation is exact up to the power-of-two 1 / R.
    float inv = 1.0f / (float)rot;
    for (i32 e = g0 * d; e < g1 * d; e++) qr[e] = qh[e];
    hadamard(qr + g0 * d, (g1 - g0) * d, rot);
    for (i32 e = g0 * d; e < g1 * d; e++) qr[e] *= inv;
    qh = qr;
  }
  // int8 keys (rotated or not) meet the query in integers: each head's query rounded to int16
  // (a step of max|q| / 32767, far below the keys' own 8-bit rounding) in the accumulators'
  // space, which the value pass clears only later; the codes are never widened to f32.
  i32 int_keys = (kvfmt == KV_INT8 || kvfmt == KV_INT8_H8) && d <= KV_MAX_HEAD_DIM;
  int16_t* q16 = (int16_t*)acc;
  float* qstep = (float*)(q16 + (long)group * d);
  if (int_keys) {
    for (i32 g = g0; g < g1; g++) quantize_x16(qh + g * d, d, d, q16 + g * d, qstep + g);
  }
  for (i32 b = lo / bs, j0 = b * bs; j0 < visible; j0 += bs, b++) {
    const u32* slab = cache + (long)table[b] * bw + (long)(2 * kvh) * sw;
    i32 n = visible - j0 < bs ? visible - j0 : bs;
    for (i32 r = j0 < lo ? lo - j0 : 0; r < n; r++) {
      if (int_keys) {
        const int8_t* codes = (const int8_t*)(slab + (long)r * (d / 4));
        float f = bits_f32(slab[bs * (d / 4) + r]) * scale;
        for (i32 g = g0; g < g1; g++)
          scores[g * sp + j0 + r] = dot_i8_q16(codes, q16 + g * d, d) * (f * qstep[g]);
        continue;
      }
      float f;
      const float* row = kv_load_row(slab, r, d, bs, kvfmt, buf, &f);
      f *= scale;
      for (i32 g = g0; g < g1; g++) scores[g * sp + j0 + r] = dot_f32(qh + g * d, row, d) * f;
    }
  }
  float* slot = 0;
  i32 blocks = (ctxLen[s] + bs - 1) / bs;
  if (mass && massOff[s] >= 0) {
    i32 first = qLen[s] - massQ[s];
    if (local >= first) slot = mass + massOff[s] + ((long)(local - first) * hq + kvh * group) * blocks;
  }
  for (i32 g = g0; g < g1; g++) {
    float* sc = scores + (long)g * sp;
    // An attention sink (gpt-oss) is one more logit with no value: in the max and the sum only.
    float sink = A->sinks ? A->sinks[kvh * group + g] : bits_f32(0xff800000u);
    float mx = sink;
    for (i32 j = lo; j < visible; j++) mx = sc[j] > mx ? sc[j] : mx;
    // Four exponentials at a time: a scalar one costs as much as a 64-element dot product.
    v128_t mxv = wasm_f32x4_splat(mx), sumv = wasm_f32x4_splat(0);
    i32 j = lo;
    for (; j + 4 <= visible; j += 4) {
      v128_t p = softmax_exp4(wasm_f32x4_sub(ld(sc + j), mxv));
      wasm_v128_store(sc + j, p);
      sumv = wasm_f32x4_add(sumv, p);
    }
    float sum = hsum(sumv);
    for (; j < visible; j++) {
      float p = expf_(sc[j] - mx);
      sc[j] = p;
      sum += p;
    }
    if (A->sinks) sum += expf_(sink - mx);
    float inv = 1.0f / sum;
    // The normalized p multiplies V below through inv: scaling by inv here instead would
    // change the output's rounding, and mass is rare.
    if (slot) {
      for (i32 b = lo / bs, j0 = b * bs; j0 < visible; j0 += bs, b++) {
        i32 n = visible - j0 < bs ? visible - j0 : bs;
        float bsum = 0.0f;
        for (i32 r = j0 < lo ? lo - j0 : 0; r < n; r++) bsum += sc[j0 + r];
        slot[(long)g * blocks + b] += bsum * inv;
      }
    }
    sc[visible] = inv;  // sp > visible: one spare float per head keeps 1 / sum
    for (i32 e = 0; e < d; e += 4) wasm_v128_store(acc + g * d + e, wasm_f32x4_splat(0));
  }
  for (i32 b = lo / bs, j0 = b * bs; j0 < visible; j0 += bs, b++) {
    const u32* slab = cache + (long)table[b] * bw + (long)(2 * kvh + 1) * sw;
    i32 n = visible - j0 < bs ? visible - j0 : bs;
    for (i32 r = j0 < lo ? lo - j0 : 0; r < n; r++) {
      float f;
      const float* row = kv_load_row(slab, r, d, bs, kvfmt, buf, &f);
      for (i32 g = g0; g < g1; g++) axpy_f32(acc + g * d, scores[g * sp + j0 + r] * f, row, d);
    }
  }
  for (i32 g = g0; g < g1; g++) {
    float* o = out + ((long)t * hq + (long)kvh * group + g) * d;
    float* ag = acc + g * d;
    float inv = scores[g * sp + visible];
    if (rot) {
      hadamard(ag, d, rot);
      inv *= 1.0f / (float)rot;
    }
    v128_t iv = wasm_f32x4_splat(inv);
    for (i32 e = 0; e < d; e += 4) wasm_v128_store(o + e, wasm_f32x4_mul(ld(ag + e), iv));
  }
}

// Query tiles: up to QT consecutive tokens of one sequence (a prompt's) share each K and V row,
// loaded and decoded once for all of them instead of once per token. Each token's arithmetic is
// attend's, in the same order, so the bits are the same either way. Taken for f32 and f16 caches
// without attention mass, when a thread's scratch holds QT tokens' scores and accumulators
// (attention_tile_floats); the other cases go through attend.
#define QT 4

INLINE i32 attention_tile_floats(i32 group, i32 sp, i32 d) { return QT * group * (sp + d) + d; }

INLINE void attend_run(const Attention* A, i32 ta, i32 tb, i32 kvh, i32 kvfmt) {
  i32 hq = A->hq, d = A->d, bs = A->bs, bw = A->bw, sw = A->sw, sp = A->sp, group = A->group;
  const u32* cache = A->cache;
  i32 s = A->tokSeq[ta];
  const i32* table = A->tables + (long)s * A->maxBlocks;
  i32 n = tb - ta;
  i32 vis[QT];
  const float* qh[QT];
  float* sc[QT];
  float* acc[QT];
  float* buf = A->scores + (long)QT * group * (sp + d);
  for (i32 i = 0; i < n; i++) {
    i32 t = ta + i;
    vis[i] = A->ctxLen[s] - A->qLen[s] + (t - A->qStart[s]) + 1;
    qh[i] = A->q + ((long)t * hq + (long)kvh * group) * d;
    sc[i] = A->scores + (long)i * group * sp;
    acc[i] = A->scores + (long)QT * group * sp + (long)i * group * d;
  }
  i32 vmax = vis[0];
  for (i32 i = 1; i < n; i++) vmax = vis[i] > vmax ? vis[i] : vmax;
  for (i32 j0 = 0, b = 0; j0 < vmax; j0 += bs, b++) {
    const u32* slab = cache + (long)table[b] * bw + (long)(2 * kvh) * sw;
    i32 rows = vmax - j0 < bs ? vmax - j0 : bs;
    for (i32 r = 0; r < rows; r++) {
      float f;
      const float* row = kv_load_row(slab, r, d, bs, kvfmt, buf, &f);
      f *= A->scale;
      for (i32 i = 0; i < n; i++) {
        if (j0 + r >= vis[i]) continue;
        for (i32 g = 0; g < group; g++)
          sc[i][g * sp + j0 + r] = dot_f32(qh[i] + g * d, row, d) * f;
      }
    }
  }
  for (i32 i = 0; i < n; i++) {
    for (i32 g = 0; g < group; g++) {
      float* p = sc[i] + (long)g * sp;
      i32 visible = vis[i];
      float mx = bits_f32(0xff800000u);
      for (i32 j = 0; j < visible; j++) mx = p[j] > mx ? p[j] : mx;
      v128_t mxv = wasm_f32x4_splat(mx), sumv = wasm_f32x4_splat(0);
      i32 j = 0;
      for (; j + 4 <= visible; j += 4) {
        v128_t e = softmax_exp4(wasm_f32x4_sub(ld(p + j), mxv));
        wasm_v128_store(p + j, e);
        sumv = wasm_f32x4_add(sumv, e);
      }
      float sum = hsum(sumv);
      for (; j < visible; j++) {
        float e = expf_(p[j] - mx);
        p[j] = e;
        sum += e;
      }
      p[visible] = 1.0f / sum;
      for (i32 e = 0; e < d; e += 4) wasm_v128_store(acc[i] + g * d + e, wasm_f32x4_splat(0));
    }
  }
  for (i32 j0 = 0, b = 0; j0 < vmax; j0 += bs, b++) {
    const u32* slab = cache + (long)table[b] * bw + (long)(2 * kvh + 1) * sw;
    i32 rows = vmax - j0 < bs ? vmax - j0 : bs;
    for (i32 r = 0; r < rows; r++) {
      float f;
      const float* row = kv_load_row(slab, r, d, bs, kvfmt, buf, &f);
      for (i32 i = 0; i < n; i++) {
        if (j0 + r >= vis[i]) continue;
        for (i32 g = 0; g < group; g++)
          axpy_f32(acc[i] + g * d, sc[i][g * sp + j0 + r] * f, row, d);
      }
    }
  }
  for (i32 i = 0; i < n; i++) {
    for (i32 g = 0; g < group; g++) {
      float* o = A->out + ((long)(ta + i) * hq + (long)kvh * group + g) * d;
      v128_t iv = wasm_f32x4_splat(sc[i][g * sp + vis[i]]);
      for (i32 e = 0; e < d; e += 4) wasm_v128_store(o + e, wasm_f32x4_mul(ld(acc[i] + g * d + e), iv));
    }
  }
}

// Tile item `item` (tokens [QT · (item / hkv), + QT) with kv head item % hkv): its runs of one
// sequence each.
INLINE void attend_tile(const Attention* A, i32 item, i32 m, i32 kvfmt) {
  i32 t0 = (item / A->hkv) * QT, kvh = item % A->hkv;
  i32 t1 = t0 + QT < m ? t0 + QT : m;
  for (i32 a = t0; a < t1;) {
    i32 b = a + 1;
    while (b < t1 && A->tokSeq[b] == A->tokSeq[a]) b++;
    attend_run(A, a, b, kvh, kvfmt);
    a = b;
  }
}

// Causal paged attention, split across threads by (token, kv head) items: token i of a sequence
// sees cache positions [0, contextLen - queryLen + i]. Each K and V row is loaded once per item
// and used by the item's query heads (GQA, MQA: its whole group, or with fewer items than
// threads, as in a batch-1 decode of an MQA model, a share of it). A head's result does not
// depend on which heads share its item, so any thread count gives the same bits.
//
// Attention mass (for token-level KV compression), when `mass` is set: for one of the last massQ[s] tokens of sequence
// s, each query head h adds, per logical block of the context, the softmax probabilities it
// gives that block's keys into a slot of its own, massOff[s] + ((i - first) * hq + h) * blocks.
// A slot adds layer after layer in order, so the sums do not depend on the thread count; the
// host adds the slots of a sequence up after the step.
//
// Record: q, out, m, tokSeq, queryStarts, queryLens, contextLens, blockTables, maxBlocks, hq,
// hkv, d, cache, kvfmt, bs, blockWords, slabWords, window (0: the whole context; else a query
// sees its last `window` positions, its own included), scale (f32 bits), scratch, stride
// (bytes per thread), sp (score floats per head, a multiple of 4 >= the longest context), mass
// (0: off), massOff (-1: not this sequence), massQ, sinks (one logit per query head, f32;
// 0: none).
void op_attention(const i32* a, i32 tid, i32 nth) {
  Attention A;
  A.q = (const float*)a[1];
  A.out = (float*)a[2];
  i32 m = a[3];
  A.tokSeq = (const i32*)a[4];
  A.qStart = (const i32*)a[5];
  A.qLen = (const i32*)a[6];
  A.ctxLen = (const i32*)a[7];
  A.tables = (const i32*)a[8];
  A.maxBlocks = a[9];
  A.hq = a[10];
  A.hkv = a[11];
  A.d = a[12];
  A.cache = (const u32*)a[13];
  i32 kvfmt = a[14];
  A.bs = a[15];
  A.bw = a[16];
  A.sw = a[17];
  A.window = a[18];
  A.scale = bits_f32((u32)a[19]);
  A.scores = (float*)(a[20] + tid * a[21]);
  A.sp = a[22];
  A.mass = (float*)a[23];
  A.massOff = (const i32*)a[24];
  A.massQ = (const i32*)a[25];
  A.sinks = (const float*)a[26];
  A.group = A.hq / A.hkv;
  i32 pairs = m * A.hkv;
  A.parts = pairs >= nth ? 1 : (nth + pairs - 1) / pairs;
  if (A.parts > A.group) A.parts = A.group;
  A.qr = A.scores + (long)A.group * A.sp;
  A.acc = A.qr + (long)A.group * A.d;
  A.buf = A.acc + (long)A.group * A.d;
  // Items dealt round-robin, not in contiguous ranges: in a causal prefill a token's cost grows
  // with its position, so ranges gave the last thread the most work (3x the first's on two
  // threads for one prompt). Each item's result is the same whichever thread computes it.
  i32 items = pairs * A.parts;
  // Query tiles share each row among a run of tokens over the whole context: not for windows.
  if (m > 1 && A.parts == 1 && !A.mass && A.window == 0 && !A.sinks && (kvfmt == KV_F32 || kvfmt == KV_F16) &&
      a[21] >= 4 * attention_tile_floats(A.group, A.sp, A.d)) {
    i32 tiles = (m + QT - 1) / QT * A.hkv;
    if (kvfmt == KV_F32) {
      for (i32 item = tid; item < tiles; item += nth) attend_tile(&A, item, m, KV_F32);
    } else {
      for (i32 item = tid; item < tiles; item += nth) attend_tile(&A, item, m, KV_F16);
    }
    return;
  }
  switch (kvfmt) {
#define ATTEND(F) \
  case F:         \
    for (i32 item = tid; item < items; item += nth) attend(&A, item, F); \
    break;
    ATTEND(KV_F32)
    ATTEND(KV_F16)
    ATTEND(KV_INT8)
    ATTEND(KV_FP8_E4M3)
    ATTEND(KV_FP8_E5M2)
    ATTEND(KV_INT8_H8)
    ATTEND(KV_INT4)
    ATTEND(KV_INT4_H32)
#undef ATTEND
    default:
      break;
  }
}

// KV compression's key shifts: the K rows of whole physical blocks, on every layer and KV head,
// re-rotated by RoPE as if their positions moved by delta (R(delta) k; the tables' entry at
// |delta|, the sine negated for a negative delta), in the cache's own format: exact decode,
// rotate in f32 with the operations of @kvasir/attention-kernels' shiftKeysReference, encode.
// The model's RoPE is rotate-half over the first rot dims of a head (as op_rope_kv). Rows are
// independent (scales are per row or per group of a row), so they split across threads.
// Record: caches (layer cache pointers), layers, shifts (block, delta pairs), count, hkv, d,
// kvfmt, bs, blockWords, slabWords, cos, sin, rot.
void op_key_shift(const i32* a, i32 tid, i32 nth) {
  const i32* caches = (const i32*)a[1];
  i32 layers = a[2];
  const i32* shifts = (const i32*)a[3];
  i32 count = a[4], hkv = a[5], d = a[6], kvfmt = a[7], bs = a[8], bw = a[9], sw = a[10];
  const float* cosT = (const float*)a[11];
  const float* sinT = (const float*)a[12];
  i32 half = a[13] / 2;
  float row[KV_MAX_HEAD_DIM];
  i32 lo, hi;
  split(layers * count * hkv * bs, 1, tid, nth, &lo, &hi);
  for (i32 item = lo; item < hi; item++) {
    i32 t = item % bs;
    i32 rest = item / bs;
    i32 h = rest % hkv;
    rest /= hkv;
    i32 k = rest % count;
    i32 l = rest / count;
    i32 block = shifts[2 * k], delta = shifts[2 * k + 1];
    u32* slab = (u32*)caches[l] + (long)block * bw + (long)(2 * h) * sw;
    i32 pos = delta < 0 ? -delta : delta;
    const float* c = cosT + (long)pos * half;
    const float* sn = sinT + (long)pos * half;
    float sign = delta < 0 ? -1.0f : 1.0f;
    kv_decode_row(slab, t, row, d, bs, kvfmt);
    for (i32 i = 0; i < half; i++) {
      float x0 = row[i], x1 = row[i + half];
      float s = sign * sn[i];
      row[i] = x0 * c[i] - x1 * s;
      row[i + half] = x1 * c[i] + x0 * s;
    }
    kv_store_row(slab, t, row, d, bs, kvfmt);
  }
}
