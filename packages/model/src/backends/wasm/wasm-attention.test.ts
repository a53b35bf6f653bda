import { ropeTables, shiftKeysReference } from '@kvasir/attention-kernels';
import { randomFloats, seededRandom } from '@kvasir/test-utils';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ropeConfig } from '../../config.js';
import {
  type ForwardPlan,
  type NormalizedPlan,
  normalizePlan,
} from '../../execution/forward-plan.js';
import {
  type KvCacheSpec,
  type KvFormatName,
  kvCacheSpec,
  kvRowWord,
} from '../../execution/kv-cache.js';
import { maxRelDiff } from '../../testing/compare.js';
import { tinyConfig } from '../../testing/model.js';
import { wasmRuntimes } from '../../testing/wasm-runtimes.js';
import { encodeKvRow, pagedAttentionCpu } from '../cpu/cpu-forward.js';
import { AttentionMass } from './wasm-attention-mass.js';
import { f32Word, KvCode, Op } from './wasm-program.js';
import type { WasmRuntime } from './wasm-runtime.js';

// The KV cache kernels (c/attention.c, c/kv-formats.h) against the CPU backend's, for every KV
// format: the write gives the CPU encoder's bytes exactly; attention reads those bytes to
// within f32-versus-f64 accumulation (the CPU reference sums in f64).
const FORMATS = Object.keys(KvCode) as KvFormatName[];
const ATTENTION_TOL = 2e-5;
// Mass sums probabilities in f32 over a row's heads and queries (the CPU in f64). int8 keys
// meet a query rounded to int16 (2^-15 of its largest element), which moves scores a little more.
const MASS_TOL = 2e-6;
const INT8_KEYS_MASS_TOL = 1e-5;

const runtime = wasmRuntimes();

function spec(format: KvFormatName, numKvHeads: number, headDim: number, blockSize: number) {
  const c = tinyConfig({ numKvHeads, numHeads: numKvHeads, headDim });
  return kvCacheSpec(c, { kvFormat: format, blockSize, numBlocks: 6 });
}

function put(rt: WasmRuntime, data: Float32Array | Int32Array | Uint32Array): number {
  const p = rt.arena.alloc(Math.max(data.length, 1) * 4);
  if (data instanceof Float32Array) rt.arena.f32(p, data.length).set(data);
  else if (data instanceof Int32Array) rt.arena.i32(p, data.length).set(data);
  else rt.arena.u32(p, data.length).set(data);
  return p;
}

/**
 * Writes `k` and `v` rows (`[tokens][kvHeads][headDim]`) into `slots` of a zeroed cache with
 * the wasm ropeKv op at position 0; returns the cache words and k as the op left it (rotated
 * in place by RoPE at position 0, which is what was encoded).
 */
function wasmWrite(
  rt: WasmRuntime,
  kv: KvCacheSpec,
  k: Float32Array,
  v: Float32Array,
  slots: Int32Array,
): { cache: Uint32Array; k: Float32Array } {
  const m = slots.length;
  const half = kv.headDim / 2;
  const cache = put(rt, new Uint32Array(kv.layerWords));
  const kp = put(rt, k);
  const q = put(rt, new Float32Array(m * kv.numKvHeads * kv.headDim));
  const p = rt.program(1);
  p.push(Op.ropeKv, [
    q,
    kp,
    put(rt, v),
    m,
    put(rt, new Int32Array(m)),
    put(rt, slots),
    kv.numKvHeads,
    kv.numKvHeads,
    kv.headDim,
    put(rt, new Float32Array(half).fill(1)),
    put(rt, new Float32Array(half)),
    cache,
    KvCode[kv.format],
    kv.blockSize,
    kv.blockWords,
    kv.slabWords,
    0,
    kv.headDim,
    f32Word(1),
  ]);
  rt.run(p);
  return {
    cache: rt.arena.u32(cache, kv.layerWords).slice(),
    k: rt.arena.f32(kp, k.length).slice(),
  };
}

function cpuWrite(
  kv: KvCacheSpec,
  k: Float32Array,
  v: Float32Array,
  slots: Int32Array,
): Uint32Array {
  const cache = new Uint32Array(kv.layerWords);
  slots.forEach((slot, i) => {
    if (slot < 0) return;
    for (let h = 0; h < kv.numKvHeads; h++) {
      const off = (i * kv.numKvHeads + h) * kv.headDim;
      encodeKvRow(kv, cache, kvRowWord(kv, slot, h, 0), k, off);
      encodeKvRow(kv, cache, kvRowWord(kv, slot, h, 1), v, off);
    }
  });
  return cache;
}

// Rows with what encoders must agree on beyond plain values: zeros (all-zero scales), ties and
// huge magnitudes, subnormals, infinities and NaN (which must not set a scale).
const special = fc.constantFrom(
  0,
  -0,
  0.5,
  -2.5,
  1e-40,
  -3e-39,
  3.2e38,
  -3.4e38,
  65504,
  Number.POSITIVE_INFINITY,
  Number.NEGATIVE_INFINITY,
  Number.NaN,
);
const element = fc.oneof(
  { weight: 8, arbitrary: fc.float({ min: -8, max: 8, noNaN: true }) },
  { weight: 1, arbitrary: fc.float({ noDefaultInfinity: true, noNaN: true }) },
  { weight: 1, arbitrary: special },
);

describe('wasm KV write', () => {
  for (const format of FORMATS) {
    for (const headDim of format.startsWith('int4') ? [32, 64] : [24, 64]) {
      it(`${format}, head dim ${headDim}: the CPU backend's bytes, bit for bit`, async () => {
        const rt = await runtime(1);
        const kv = spec(format, 2, headDim, 4);
        const n = 3 * kv.numKvHeads * headDim;
        // Slots in three blocks, one skipped (-1).
        const slots = Int32Array.of(5, -1, 22);
        await fc.assert(
          fc.asyncProperty(
            fc.array(element, { minLength: n, maxLength: n }),
            fc.array(element, { minLength: n, maxLength: n }),
            async (ka, va) => {
              const k = Float32Array.from(ka);
              const v = Float32Array.from(va);
              const got = wasmWrite(rt, kv, k, v, slots);
              expect(got.cache).toEqual(cpuWrite(kv, got.k, v, slots));
            },
          ),
          { numRuns: 40, seed: headDim },
        );
      });
    }
  }
});

interface Shape {
  readonly name: string;
  readonly hq: number;
  readonly hkv: number;
  readonly blockSize: number;
}
const SHAPES: readonly Shape[] = [
  { name: 'MHA', hq: 2, hkv: 2, blockSize: 8 },
  { name: 'GQA', hq: 6, hkv: 2, blockSize: 16 },
  { name: 'MQA', hq: 4, hkv: 1, blockSize: 4 },
];

/**
 * A batch over a cache filled with random K/V rows by the CPU encoder: a decode ending in a
 * partial block, a prefill chunk after cached context, and a fresh prefill.
 */
function batch(
  kv: KvCacheSpec,
  hq: number,
  seed: number,
  rows = [
    { queryLen: 1, contextLen: 2 * kv.blockSize + 3 },
    { queryLen: 5, contextLen: kv.blockSize + 6 },
    { queryLen: 7, contextLen: 7 },
  ],
) {
  const rnd = seededRandom(seed);
  const bs = kv.blockSize;
  const numBlocks = rows.reduce((a, r) => a + Math.ceil(r.contextLen / bs), 0);
  const kvs = kvCacheSpec(
    tinyConfig({ numKvHeads: kv.numKvHeads, numHeads: hq, headDim: kv.headDim }),
    {
      kvFormat: kv.format,
      blockSize: bs,
      numBlocks: numBlocks + 1,
    },
  );
  const cache = new Uint32Array(kvs.layerWords);
  // Tables hand out blocks from the top down, so logical order differs from physical order.
  let next = numBlocks;
  let start = 0;
  // Attention mass for the last 3 queries of the chunk and the decode; the fresh prefill asks none.
  const massQueries = [1, 3, undefined];
  const planRows = rows.map((r, i) => {
    const blockTable = Array.from({ length: Math.ceil(r.contextLen / bs) }, () => next--);
    const mq = massQueries[i];
    const row = {
      queryStart: start,
      queryLen: r.queryLen,
      contextLen: r.contextLen,
      blockTable,
      ...(mq === undefined
        ? {}
        : { massQueries: mq, attentionMass: new Float32Array(blockTable.length) }),
    };
    start += r.queryLen;
    return row;
  });
  const d = kv.headDim;
  const krow = new Float32Array(d);
  for (const r of planRows) {
    for (let j = 0; j < r.contextLen; j++) {
      const slot = (r.blockTable[Math.floor(j / bs)] as number) * bs + (j % bs);
      for (let h = 0; h < kv.numKvHeads; h++) {
        // Keys with an outlier channel, as real keys have (it exercises the rotated formats).
        krow.set(randomFloats(rnd, d, 1));
        krow[3] = 6 * (rnd() - 0.5);
        encodeKvRow(kvs, cache, kvRowWord(kvs, slot, h, 0), krow, 0);
        encodeKvRow(kvs, cache, kvRowWord(kvs, slot, h, 1), randomFloats(rnd, d, 1), 0);
      }
    }
  }
  const t = start;
  const plan: ForwardPlan = {
    tokenIds: new Int32Array(t),
    positions: new Int32Array(t),
    slotMapping: new Int32Array(t).fill(-1),
    rows: planRows,
    logitsIndices: new Int32Array(0),
  };
  const np = normalizePlan(plan, {
    vocabSize: 1,
    numBlocks: numBlocks + 1,
    blockSize: bs,
    maxPosition: 1 << 20,
  });
  const q = randomFloats(rnd, t * hq * d, 1);
  return { kv: kvs, cache, plan: np, q };
}

/**
 * The attention op over `cache` for `plan`; returns `[tokens][hq][headDim]`, and with `mass`
 * fills the plan's `massOut` rows.
 */
function wasmAttention(
  rt: WasmRuntime,
  kv: KvCacheSpec,
  hq: number,
  cache: Uint32Array,
  plan: NormalizedPlan,
  q: Float32Array,
  mass = false,
  window = 0,
  sinks?: Float32Array,
): Float32Array {
  const t = plan.numTokens;
  const d = kv.headDim;
  const group = hq / kv.numKvHeads;
  const tokSeq = new Int32Array(t);
  for (let s = 0; s < plan.numSeqs; s++) {
    const a = plan.queryStarts[s] as number;
    tokSeq.fill(s, a, a + (plan.queryLens[s] as number));
  }
  const sp = Math.ceil((Math.max(...plan.contextLens) + 1) / 4) * 4;
  // Room for the query tiles (4 tokens' scores and accumulators, as the executor sizes it), so
  // f32 and f16 prompts take them; with mass the op goes token by token, and the mass test
  // below holds the two to the same bits.
  const stride = (Math.max(group * sp + (2 * group + 1) * d, 4 * group * (sp + d) + d) + 64) * 4;
  const out = put(rt, new Float32Array(t * hq * d));
  const masses = new AttentionMass(rt.arena, hq, kv.blockSize);
  const massArgs = mass ? masses.prepare(plan) : [0, 0, 0];
  const p = rt.program(1);
  p.push(Op.attention, [
    put(rt, q),
    out,
    t,
    put(rt, tokSeq),
    put(rt, plan.queryStarts),
    put(rt, plan.queryLens),
    put(rt, plan.contextLens),
    put(rt, plan.blockTables),
    plan.maxBlocksPerSeq,
    hq,
    kv.numKvHeads,
    d,
    put(rt, cache),
    KvCode[kv.format],
    kv.blockSize,
    kv.blockWords,
    kv.slabWords,
    window,
    f32Word(1 / Math.sqrt(d)),
    rt.arena.alloc(stride * rt.pool.threads),
    stride,
    sp,
    ...massArgs,
    sinks ? put(rt, sinks) : 0,
  ]);
  rt.run(p);
  if (mass) masses.collect(plan);
  return rt.arena.f32(out, t * hq * d).slice();
}

describe('wasm paged attention', () => {
  for (const format of FORMATS) {
    // A head dim of 24: rows of 8-bit codes end in half a vector (int4 needs multiples of 32).
    if (!format.startsWith('int4')) {
      it(`${format} GQA, head dim 24: output and mass as the CPU backend's`, async () => {
        const rt = await runtime(2);
        const b = batch(spec(format, 2, 24, 8), 6, 24);
        const c = tinyConfig({ numHeads: 6, numKvHeads: 2, headDim: 24 });
        const want = new Float32Array(b.q.length);
        const wantMass = b.plan.massOut.map((m) => (m ? new Float64Array(m.length) : undefined));
        pagedAttentionCpu(c, b.kv, b.cache, b.q, b.plan, want, wantMass);
        const got = wasmAttention(rt, b.kv, 6, b.cache, b.plan, b.q, true);
        expect(maxRelDiff(got, want)).toBeLessThan(ATTENTION_TOL);
        for (const [s, m] of b.plan.massOut.entries()) {
          if (m === undefined) continue;
          const w = Float32Array.from(wantMass[s] as Float64Array);
          expect(maxRelDiff(m, w)).toBeLessThan(INT8_KEYS_MASS_TOL);
        }
      });
    }
    it(`${format}: a sliding window of 11 (decode, chunked and fresh prefill rows, mass) equals the CPU backend's`, async () => {
      const shape = SHAPES[0] as (typeof SHAPES)[number];
      const rt = await runtime(2);
      const b = batch(spec(format, shape.hkv, 64, shape.blockSize), shape.hq, shape.hq * 7);
      const c = tinyConfig({ numHeads: shape.hq, numKvHeads: shape.hkv, headDim: 64 });
      const want = new Float32Array(b.q.length);
      const wantMass = b.plan.massOut.map((m) => (m ? new Float64Array(m.length) : undefined));
      pagedAttentionCpu(c, b.kv, b.cache, b.q, b.plan, want, wantMass, { window: 11 });
      const got = wasmAttention(rt, b.kv, shape.hq, b.cache, b.plan, b.q, true, 11);
      expect(maxRelDiff(got, want)).toBeLessThan(ATTENTION_TOL);
      for (const [s, m] of b.plan.massOut.entries()) {
        if (m === undefined) continue;
        const tol = format.startsWith('int8') ? INT8_KEYS_MASS_TOL : MASS_TOL;
        expect(maxRelDiff(m, Float32Array.from(wantMass[s] as Float64Array))).toBeLessThan(tol);
      }
      // The window decides: the whole context gives other rows.
      const whole = new Float32Array(b.q.length);
      pagedAttentionCpu(c, b.kv, b.cache, b.q, b.plan, whole);
      expect(maxRelDiff(got, whole)).toBeGreaterThan(10 * ATTENTION_TOL);
    });
    it(`${format}: attention sinks (a logit per query head), with and without a window of 11, equal the CPU backend's; without them the rows differ`, async () => {
      const shape = SHAPES[0] as (typeof SHAPES)[number];
      const rt = await runtime(2);
      const b = batch(spec(format, shape.hkv, 64, shape.blockSize), shape.hq, shape.hq * 7);
      const c = tinyConfig({ numHeads: shape.hq, numKvHeads: shape.hkv, headDim: 64 });
      // Sinks from well below to well above the scores: some heads all but ignore their keys.
      const sinks = Float32Array.from({ length: shape.hq }, (_, h) => -4 + (8 * h) / shape.hq);
      for (const window of [0, 11]) {
        const want = new Float32Array(b.q.length);
        pagedAttentionCpu(c, b.kv, b.cache, b.q, b.plan, want, undefined, {
          window: window || null,
          sinks,
        });
        const got = wasmAttention(rt, b.kv, shape.hq, b.cache, b.plan, b.q, false, window, sinks);
        expect(maxRelDiff(got, want)).toBeLessThan(ATTENTION_TOL);
        const plain = wasmAttention(rt, b.kv, shape.hq, b.cache, b.plan, b.q, false, window);
        expect(maxRelDiff(plain, want)).toBeGreaterThan(10 * ATTENTION_TOL);
      }
    });
    for (const shape of SHAPES) {
      it(`${format} ${shape.name} (block ${shape.blockSize}): decode, chunked and fresh prefill rows equal the CPU backend's`, async () => {
        const rt = await runtime(2);
        const b = batch(spec(format, shape.hkv, 64, shape.blockSize), shape.hq, shape.hq * 7);
        const c = tinyConfig({ numHeads: shape.hq, numKvHeads: shape.hkv, headDim: 64 });
        const want = new Float32Array(b.q.length);
        pagedAttentionCpu(c, b.kv, b.cache, b.q, b.plan, want);
        const got = wasmAttention(rt, b.kv, shape.hq, b.cache, b.plan, b.q);
        expect(maxRelDiff(got, want)).toBeLessThan(ATTENTION_TOL);
      });

      it(`${format} ${shape.name}: attention mass of the last queries per logical block equals the CPU backend's`, async () => {
        const rt = await runtime(2);
        const b = batch(spec(format, shape.hkv, 64, shape.blockSize), shape.hq, shape.hq * 5);
        const c = tinyConfig({ numHeads: shape.hq, numKvHeads: shape.hkv, headDim: 64 });
        const want = b.plan.massOut.map((m) => (m ? new Float64Array(m.length) : undefined));
        pagedAttentionCpu(c, b.kv, b.cache, b.q, b.plan, new Float32Array(b.q.length), want);
        const plain = wasmAttention(rt, b.kv, shape.hq, b.cache, b.plan, b.q);
        const withMass = wasmAttention(rt, b.kv, shape.hq, b.cache, b.plan, b.q, true);
        // f32 / f16: the query tiles (plain) and the token-by-token path (mass), the same bits.
        expect(withMass).toEqual(plain);
        for (const [s, m] of b.plan.massOut.entries()) {
          if (m === undefined) continue;
          const tol = format.startsWith('int8') ? INT8_KEYS_MASS_TOL : MASS_TOL;
          expect(maxRelDiff(m, Float32Array.from(want[s] as Float64Array))).toBeLessThan(tol);
          // Each counted query gives its heads' probabilities, which sum to 1 per head.
          const total = m.reduce((a, x) => a + x, 0);
          expect(total).toBeCloseTo(shape.hq * (b.plan.massQueries[s] as number), 4);
        }
      });
    }
  }

  it('gives bit-identical results on 1, 2 and 3 threads, every format', async () => {
    for (const format of FORMATS) {
      const b = batch(spec(format, 2, 64, 8), 6, 99);
      const results: Float32Array[] = [];
      for (const threads of [1, 2, 3]) {
        results.push(wasmAttention(await runtime(threads), b.kv, 6, b.cache, b.plan, b.q));
      }
      expect(results[1], format).toEqual(results[0]);
      expect(results[2], format).toEqual(results[0]);
    }
  });

  // One (token, kv head) pair for 2 and 3 threads: each takes a share of the query heads (with
  // 2 heads, one each: the one-head paths that never store a decoded row).
  it.each([6, 2])(
    'one decode row of an MQA model with %i heads shares them among the threads: 1, 2, 3 threads bit-identical, as the CPU backend',
    async (hq) => {
      const c = tinyConfig({ numHeads: hq, numKvHeads: 1, headDim: 64 });
      for (const format of FORMATS) {
        const b = batch(spec(format, 1, 64, 8), hq, 5, [{ queryLen: 1, contextLen: 29 }]);
        const want = new Float32Array(b.q.length);
        pagedAttentionCpu(c, b.kv, b.cache, b.q, b.plan, want);
        const results: Float32Array[] = [];
        const masses: Float32Array[] = [];
        for (const threads of [1, 2, 3]) {
          results.push(wasmAttention(await runtime(threads), b.kv, hq, b.cache, b.plan, b.q, true));
          masses.push((b.plan.massOut[0] as Float32Array).slice());
        }
        expect(maxRelDiff(results[0] as Float32Array, want), format).toBeLessThan(ATTENTION_TOL);
        expect(results[1], format).toEqual(results[0]);
        expect(results[2], format).toEqual(results[0]);
        expect(masses[1], format).toEqual(masses[0]);
        expect(masses[2], format).toEqual(masses[0]);
      }
    },
  );
});

describe('wasm key shifts', () => {
  // 48 of 64: Phi-4-mini's partial rotary (0.75), the last 16 dims of each key left as they are.
  for (const [format, rotaryDim] of [
    ...FORMATS.map((f) => [f, 64] as const),
    ['f16', 48] as const,
  ]) {
    it(`${format}, ${rotaryDim} of 64 dims rotated: the bytes of attention-kernels' shiftKeysReference, bit for bit, on every layer; V and other blocks untouched`, async () => {
      const rt = await runtime(3);
      const c = tinyConfig({ numHeads: 4, numKvHeads: 2, headDim: 64, rotaryDim });
      const kv = kvCacheSpec(c, { kvFormat: format, blockSize: 8, numBlocks: 5 });
      const rnd = seededRandom(format.length);
      const layers = [0, 1].map(() => {
        const cache = new Uint32Array(kv.layerWords);
        for (let slot = 0; slot < kv.numBlocks * kv.blockSize; slot++) {
          for (let h = 0; h < kv.numKvHeads; h++) {
            for (const side of [0, 1] as const) {
              const row = randomFloats(rnd, kv.headDim, 2);
              encodeKvRow(kv, cache, kvRowWord(kv, slot, h, side), row, 0);
            }
          }
        }
        return cache;
      });
      const shifts = [
        { block: 3, delta: -37 },
        { block: 0, delta: 5 },
        { block: 4, delta: -1 },
      ];
      const positions = 64;
      const rope = ropeConfig(c, positions);
      const tables = ropeTables(rope);
      const ptrs = layers.map((l) => put(rt, l));
      const shiftWords = Int32Array.from(shifts.flatMap((k) => [k.block, k.delta]));
      const p = rt.program(1);
      p.push(Op.keyShift, [
        put(rt, Int32Array.from(ptrs)),
        layers.length,
        put(rt, shiftWords),
        shifts.length,
        kv.numKvHeads,
        kv.headDim,
        KvCode[format],
        kv.blockSize,
        kv.blockWords,
        kv.slabWords,
        put(rt, tables.cos),
        put(rt, tables.sin),
        rope.rotaryDim ?? kv.headDim,
      ]);
      rt.run(p);
      layers.forEach((cache, l) => {
        const before = cache.slice();
        shiftKeysReference({ ...kv, format: kv.kvFormat, rope }, tables, cache, shifts);
        // The test can tell: the reference did change the shifted blocks' K words.
        expect(cache).not.toEqual(before);
        expect(rt.arena.u32(ptrs[l] as number, kv.layerWords)).toEqual(cache);
      });
    });
  }
});
