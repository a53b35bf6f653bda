import { describe, expect, it } from 'vitest';
import { SchedulerError } from '../errors.js';
import { findMaxRate } from './capacity.js';
import { StepCostModel } from './cost-model.js';
import { HARDWARE, kvCapacity, MODELS } from './profiles.js';
import { simulate } from './simulate.js';
import { generateWorkload } from './workloads.js';

const shape = (rows: [number, number][], swapBlocks = 0) => ({
  numRows: rows.length,
  queryLen: (r: number) => rows[r]![0],
  contextLen: (r: number) => rows[r]![1],
  swapBlocks,
});

describe('profiles and KV capacity', () => {
  it('computes KV bytes and blocks from memory, utilization and weights', () => {
    const cap = kvCapacity('OPT-13B', 'A100-40GB');
    expect(cap.kvBytesPerToken).toBe(2 * 40 * 40 * 128 * 2); // 800 KB, the paper's figure
    const expected = Math.floor((40e9 * 0.9 - 12.85e9 * 2) / (cap.kvBytesPerToken * 16));
    expect(cap.kvBlocks).toBe(expected);
    // GQA: Llama-2-70B stores 8 KV heads, not 64.
    expect(kvCapacity('Llama-2-70B', 'H200', { tensorParallel: 2 }).kvBytesPerToken).toBe(
      2 * 80 * 8 * 128 * 2,
    );
  });

  it('refuses a model whose weights do not fit, and unknown names', () => {
    expect(() => kvCapacity('Llama-2-70B', 'A100-40GB')).toThrow(SchedulerError);
    expect(() => kvCapacity('GPT-9' as 'OPT-13B', 'H200')).toThrow(/unknown model/);
  });
});

describe('roofline cost model', () => {
  const cm = new StepCostModel(MODELS['OPT-13B'], HARDWARE['A100-40GB']);

  it('prices a small decode batch by bandwidth (weights read once) plus overhead', () => {
    const c = cm.cost(shape([[1, 100]]));
    expect(c.computeBound).toBe(false);
    const bytes = 12.85e9 * 2 + 101 * 819200;
    expect(c.bytes).toBe(bytes);
    expect(c.seconds).toBeCloseTo(bytes / (1555e9 * 0.8) + 0.002, 9);
  });

  it('prices a long prefill by FLOPs, with causal attention pairs', () => {
    const c = cm.cost(shape([[2048, 2048]]));
    expect(c.computeBound).toBe(true);
    const pairs = (2048 * 2049) / 2;
    expect(c.flops).toBe(2 * 12.85e9 * 2048 + 4 * 40 * 40 * 128 * pairs);
  });

  it('never gets cheaper with more tokens or longer contexts, and batching amortizes weights', () => {
    const one = cm.cost(shape([[1, 500]])).seconds;
    const many = cm.cost(shape(Array.from({ length: 32 }, () => [1, 500] as [number, number])));
    expect(many.seconds).toBeGreaterThan(one);
    expect(many.seconds).toBeLessThan(32 * one * 0.25);
    expect(cm.cost(shape([[1, 1000]])).seconds).toBeGreaterThan(one);
    expect(cm.cost(shape([], 0)).seconds).toBe(0);
    expect(cm.cost(shape([[1, 500]], 10)).seconds).toBeGreaterThan(one);
  });
});

describe('workloads', () => {
  it('is deterministic per seed and keeps lengths when only the rate changes', () => {
    const a = generateWorkload({ kind: 'sharegpt', numRequests: 50, seed: 3, rate: 1 });
    const b = generateWorkload({ kind: 'sharegpt', numRequests: 50, seed: 3, rate: 1 });
    const c = generateWorkload({ kind: 'sharegpt', numRequests: 50, seed: 3, rate: 4 });
    expect(a).toEqual(b);
    expect(c.map((r) => r.outputLen)).toEqual(a.map((r) => r.outputLen));
    expect(c[49]!.arrivalTime).toBeCloseTo(a[49]!.arrivalTime / 4, 9);
    for (let i = 1; i < a.length; i++) {
      expect(a[i]!.arrivalTime).toBeGreaterThanOrEqual(a[i - 1]!.arrivalTime);
    }
  });

  it('draws arrivals for a duration: the count scales with the rate', () => {
    const a = generateWorkload({ kind: 'alpaca', durationS: 100, seed: 2, rate: 2 });
    const b = generateWorkload({ kind: 'alpaca', durationS: 100, seed: 2, rate: 8 });
    for (const r of [...a, ...b]) expect(r.arrivalTime).toBeLessThanOrEqual(100);
    expect(a.length).toBeGreaterThan(150);
    expect(a.length).toBeLessThan(250);
    expect(b.length / a.length).toBeGreaterThan(3.5);
    expect(b.length / a.length).toBeLessThan(4.5);
    expect(() => generateWorkload({ kind: 'alpaca', rate: 1 })).toThrow(SchedulerError);
  });

  it('draws long-tailed chat lengths, short instructions, and a shared system prompt', () => {
    const mean = (xs: number[]) => xs.reduce((s, x) => s + x, 0) / xs.length;
    const chat = generateWorkload({ kind: 'sharegpt', numRequests: 2000, seed: 1, rate: 1 });
    const inst = generateWorkload({ kind: 'alpaca', numRequests: 2000, seed: 1, rate: 1 });
    const chatOut = mean(chat.map((r) => r.outputLen));
    expect(chatOut).toBeGreaterThan(250);
    expect(chatOut).toBeLessThan(420);
    expect(mean(chat.map((r) => r.promptTokenIds.length))).toBeGreaterThan(120);
    expect(mean(inst.map((r) => r.outputLen))).toBeLessThan(80);
    for (const r of chat) expect(r.promptTokenIds.length + r.outputLen).toBeLessThanOrEqual(2048);
    const sp = generateWorkload({
      kind: 'shared-prefix',
      numRequests: 5,
      seed: 1,
      rate: 1,
      sharedPrefixLen: 64,
    });
    for (const r of sp) {
      expect(Array.from(r.promptTokenIds.subarray(0, 64))).toEqual(
        Array.from(sp[0]!.promptTokenIds.subarray(0, 64)),
      );
    }
  });
});

describe('simulate', () => {
  const small = (rate: number, system: 'kvasir' | 'orca' | 'static' = 'kvasir') =>
    simulate({
      model: 'OPT-13B',
      hardware: 'A100-40GB',
      system,
      workload: { kind: 'sharegpt', numRequests: 60, seed: 5, rate },
    });

  it('is deterministic', () => {
    expect(small(2)).toEqual(small(2));
    expect(small(2, 'static')).toEqual(small(2, 'static'));
  });

  it('conserves requests in every system', () => {
    for (const system of ['kvasir', 'orca', 'static'] as const) {
      const r = small(3, system);
      expect(r.completed + r.rejected).toBe(60);
      expect(r.completed).toBe(60);
      expect(r.makespanS).toBeGreaterThan(0);
    }
  });

  it('latency grows with the request rate', () => {
    for (const system of ['kvasir', 'orca'] as const) {
      const lat = [0.25, 1, 4, 16, 64].map((rate) => small(rate, system).meanNormalizedLatencyS);
      for (let i = 1; i < lat.length; i++) expect(lat[i]!).toBeGreaterThanOrEqual(lat[i - 1]!);
      expect(lat[4]!).toBeGreaterThan(lat[0]! * 1.4);
    }
  });

  it('paged batching holds bigger batches than max-length reservation', () => {
    const kv = small(8, 'kvasir');
    const orca = small(8, 'orca');
    expect(kv.meanBatchSize).toBeGreaterThan(orca.meanBatchSize * 1.5);
    expect(kv.meanNormalizedLatencyS).toBeLessThan(orca.meanNormalizedLatencyS);
    expect(orca.kvBlocks).toBe(Math.floor(kvCapacity('OPT-13B', 'A100-40GB').kvTokens / 2048));
  });

  it('prefix caching serves a shared system prompt from cache', () => {
    const wl = { kind: 'shared-prefix', numRequests: 40, seed: 1, rate: 4 } as const;
    const on = simulate({ model: 'Llama-3-8B', hardware: 'H100-80GB', workload: wl });
    const off = simulate({
      model: 'Llama-3-8B',
      hardware: 'H100-80GB',
      workload: wl,
      enablePrefixCaching: false,
    });
    expect(on.prefixHitRate).toBeGreaterThan(0.8);
    expect(off.prefixHitRate).toBe(0);
    expect(on.meanTtftS).toBeLessThan(off.meanTtftS);
  });

  it('simulates a GQA 70B model sharded over two H200s, with more KV room than its MHA twin', () => {
    const gqa = MODELS['Llama-2-70B'];
    const mha = { ...gqa, name: 'Llama-2-70B-MHA', numKvHeads: gqa.numHeads };
    const opts = { tensorParallel: 2 } as const;
    expect(kvCapacity(gqa, 'H200', opts).kvTokens).toBeGreaterThan(
      7 * kvCapacity(mha, 'H200', opts).kvTokens,
    );
    const r = simulate({
      model: 'Llama-2-70B',
      hardware: 'H200',
      tensorParallel: 2,
      workload: { kind: 'alpaca', numRequests: 30, seed: 3, rate: 4 },
    });
    expect(r.completed).toBe(30);
  });

  it('runs swap preemption through the host link', () => {
    const r = simulate({
      model: 'OPT-13B',
      hardware: 'A100-40GB',
      workload: { kind: 'sharegpt', numRequests: 60, seed: 5, rate: 16 },
      preemptionMode: 'swap',
      hostSwapBlocks: 4000,
    });
    expect(r.completed).toBe(60);
    expect(r.preemptions).toBeGreaterThan(0);
  });
});

describe('findMaxRate', () => {
  it('brackets and bisects to a rate under the bound with a faster one over it', () => {
    const res = findMaxRate({
      model: 'OPT-13B',
      hardware: 'A100-40GB',
      workload: { kind: 'sharegpt', numRequests: 60, seed: 5 },
      // 60 requests saturate near 0.042 s/token even all at once: a bound inside the curve.
      latencyBound: 0.03,
      iterations: 4,
    });
    expect(res.maxRate).toBeGreaterThan(0);
    expect(res.atMaxRate!.meanNormalizedLatencyS).toBeLessThanOrEqual(0.03);
    const over = res.probes.filter((p) => p.rate > res.maxRate);
    expect(over.length).toBeGreaterThan(0);
    for (const p of over) expect(p.meanNormalizedLatencyS).toBeGreaterThan(0.03);
    // Bisection narrowed the bracket: the closest failing probe is within 2^(1/16) × maxRate.
    const closest = Math.min(...over.map((p) => p.rate));
    expect(closest / res.maxRate).toBeLessThan(1.05);
  });

  it('answers 0 when even the slowest rate misses the bound', () => {
    const res = findMaxRate({
      model: 'OPT-13B',
      hardware: 'A100-40GB',
      workload: { kind: 'alpaca', numRequests: 10, seed: 1 },
      latencyBound: 0.001,
      minRate: 0.1,
    });
    expect(res.maxRate).toBe(0);
    expect(() =>
      findMaxRate({
        model: 'OPT-13B',
        hardware: 'A100-40GB',
        workload: { kind: 'alpaca', numRequests: 10 },
        latencyBound: 0,
      }),
    ).toThrow(SchedulerError);
  });
});
