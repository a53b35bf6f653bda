import { KvCacheManager } from '@kvasir/kv-allocator';
import { describe, expect, it } from 'vitest';
import { SchedulerError } from './errors';
import {
  definePreemptionPolicy,
  defineQueuePolicy,
  longestPrefixMatchPolicy,
  priorityPolicy,
} from './policies';
import { Scheduler } from './scheduler';
import type { SchedulerOptions } from './scheduler-options';
import { FakeExecutor, referenceOutput } from './testing/fake-executor';
import type { BatchPlan, RequestOutput, SchedulerEvent, SchedulerRequest } from './types';

const VOCAB = 50;
const SEED = 99;

function setup(opts: Partial<SchedulerOptions> & { numBlocks?: number; blockSize?: number } = {}) {
  const { numBlocks = 64, blockSize = 4, ...rest } = opts;
  const kv = new KvCacheManager({ numBlocks, blockSize });
  const events: SchedulerEvent[] = [];
  const sched = new Scheduler({
    kvCache: kv,
    maxModelLen: 256,
    onEvent: (e) => events.push(e),
    ...rest,
  });
  const exec = new FakeExecutor(blockSize, SEED, VOCAB);
  const outputs = new Map<string, RequestOutput>();
  const step = (): BatchPlan => {
    const plan = sched.schedule();
    for (const o of sched.update(exec.run(plan))) outputs.set(o.requestId, o);
    return plan;
  };
  const runAll = (limit = 1000) => {
    for (let i = 0; i < limit && sched.hasUnfinished(); i++) step();
    expect(sched.hasUnfinished()).toBe(false);
  };
  return { kv, sched, exec, outputs, step, runAll, events };
}

const seqPrompt = (len: number, start = 1) => Array.from({ length: len }, (_, i) => start + i);

function expectError(fn: () => unknown, code: string, match?: RegExp): void {
  try {
    fn();
  } catch (e) {
    expect(SchedulerError.isInstance(e)).toBe(true);
    expect((e as SchedulerError).code).toBe(code);
    if (match) expect((e as Error).message).toMatch(match);
    return;
  }
  throw new Error('expected a SchedulerError');
}

describe('add() validation', () => {
  const base: SchedulerRequest = { id: 'a', promptTokenIds: [1, 2, 3], maxTokens: 4 };
  const cases: [string, Partial<SchedulerRequest> | Record<string, unknown>, RegExp][] = [
    ['max tokens < 1', { maxTokens: 0 }, /maxTokens/],
    ['non-integer max tokens', { maxTokens: 1.5 }, /maxTokens/],
    ['empty prompt', { promptTokenIds: [] }, /empty/],
    ['prompt over maxModelLen', { promptTokenIds: seqPrompt(257) }, /maxModelLen/],
    ['non-integer token', { promptTokenIds: [1, 2.5] }, /promptTokenIds\[1\]/],
    ['negative token', { promptTokenIds: [-1] }, /promptTokenIds\[0\]/],
    ['token beyond i32', { promptTokenIds: [2 ** 31] }, /promptTokenIds\[0\]/],
    ['n < 1', { n: 0 }, /\bn\b/],
    ['n over maxNumSeqs', { n: 9 }, /maxNumSeqs/],
    ['string priority', { priority: 'high' }, /priority/],
    ['NaN priority', { priority: Number.NaN }, /priority/],
    ['beam width 1', { beamWidth: 1 }, /beamWidth/],
    ['beam with n', { beamWidth: 2, n: 2 }, /beamWidth/],
    ['bad stop token', { stopTokenIds: [1.5] }, /stopTokenIds/],
    ['empty id', { id: '' }, /id/],
  ];
  for (const [name, patch, msg] of cases) {
    it(`refuses ${name} with a typed error and leaves state untouched`, () => {
      const { sched, kv } = setup({ maxNumSeqs: 8 });
      const before = JSON.stringify(sched.metrics());
      expectError(
        () => sched.add({ ...base, ...patch } as SchedulerRequest),
        'INVALID_REQUEST',
        msg,
      );
      expect(sched.hasUnfinished()).toBe(false);
      expect(JSON.stringify(sched.metrics())).toBe(before);
      expect(kv.stats().numSequences).toBe(0);
      // The id is still free.
      sched.add(base);
      expect(sched.numUnfinished).toBe(1);
    });
  }

  it('refuses n larger than the token budget (its decodes could never run together)', () => {
    const { sched } = setup({ maxNumSeqs: 8, maxNumBatchedTokens: 4 });
    expectError(() => sched.add({ ...base, n: 5 }), 'INVALID_REQUEST', /maxNumBatchedTokens 4/);
    expect(sched.hasUnfinished()).toBe(false);
  });

  it('refuses a duplicate live id', () => {
    const { sched } = setup();
    sched.add(base);
    expectError(() => sched.add(base), 'DUPLICATE_REQUEST');
    expect(sched.numUnfinished).toBe(1);
  });

  it('refuses bad configuration', () => {
    const kv = new KvCacheManager({ numBlocks: 8, blockSize: 4 });
    expectError(() => new Scheduler({ kvCache: kv, maxModelLen: 0 }), 'INVALID_CONFIG');
    expectError(
      () => new Scheduler({ kvCache: kv, maxModelLen: 64, maxNumSeqs: 0 }),
      'INVALID_CONFIG',
    );
    expectError(
      () =>
        new Scheduler({
          kvCache: kv,
          maxModelLen: 64,
          maxNumBatchedTokens: 32,
          enableChunkedPrefill: false,
        }),
      'INVALID_CONFIG',
      /chunked/,
    );
    expectError(
      () =>
        new Scheduler({
          kvCache: kv,
          maxModelLen: 64,
          preemptionMode: 'drop' as 'swap',
        }),
      'INVALID_CONFIG',
    );
  });
});

describe('batch plan', () => {
  it('flattens tokens, positions and slots, pads block tables, and asks logits for the last prompt token', () => {
    const { sched, kv } = setup();
    sched.add({ id: 'a', promptTokenIds: seqPrompt(6), maxTokens: 3 });
    sched.add({ id: 'b', promptTokenIds: seqPrompt(3, 100), maxTokens: 3 });
    const plan = sched.schedule();
    expect(plan.numTokens).toBe(9);
    expect(Array.from(plan.tokenIds)).toEqual([...seqPrompt(6), ...seqPrompt(3, 100)]);
    expect(Array.from(plan.positions)).toEqual([0, 1, 2, 3, 4, 5, 0, 1, 2]);
    expect(Array.from(plan.queryStartLoc)).toEqual([0, 6, 9]);
    expect(Array.from(plan.contextLens)).toEqual([6, 3]);
    expect(plan.maxBlocksPerSeq).toBe(2);
    expect(Array.from(plan.logitsIndices)).toEqual([5, 8]);
    expect(plan.rows.map((r) => r.isPrefill)).toEqual([true, true]);
    for (let r = 0; r < plan.rows.length; r++) {
      const row = plan.rows[r]!;
      const table = kv.blockTable(row.seqId);
      expect(Array.from(row.blockTable)).toEqual([...table]);
      const padded = plan.blockTables.subarray(r * 2, r * 2 + 2);
      expect(Array.from(padded.subarray(0, table.length))).toEqual([...table]);
      for (let i = 0; i < row.queryLen; i++) {
        const pos = plan.positions[row.queryStart + i]!;
        expect(plan.slotMapping[row.queryStart + i]).toBe(
          table[Math.floor(pos / 4)]! * 4 + (pos % 4),
        );
      }
    }
    expect(Array.from(plan.sampleSeqIds)).toEqual(plan.rows.map((r) => r.seqId));
    // Decode step: one token per row, positions continue.
    sched.update({ seqIds: plan.sampleSeqIds, tokenIds: [7, 8] });
    const next = sched.schedule();
    expect(Array.from(next.tokenIds)).toEqual([7, 8]);
    expect(Array.from(next.positions)).toEqual([6, 3]);
    expect(next.numDecodeTokens).toBe(2);
  });

  it('generates exactly what an uncached reference computes', () => {
    const { sched, outputs, runAll } = setup({ eosTokenId: 0 });
    const prompts = [seqPrompt(9), seqPrompt(1, 30), seqPrompt(17, 5)];
    prompts.forEach((p, i) => {
      sched.add({ id: `r${i}`, promptTokenIds: p, maxTokens: 12 });
    });
    runAll();
    prompts.forEach((p, i) => {
      const ref = referenceOutput(SEED, VOCAB, p, 0, 12, (t) => t === 0, 256);
      expect(Array.from(outputs.get(`r${i}`)!.outputs[0]!.tokenIds)).toEqual(ref);
    });
  });
});

describe('budget, chunked prefill and ordering', () => {
  it('schedules running decodes first and fills the rest of the budget with a prefill chunk', () => {
    const { sched, step } = setup({ maxNumBatchedTokens: 8 });
    sched.add({ id: 'a', promptTokenIds: seqPrompt(4), maxTokens: 10 });
    sched.add({ id: 'b', promptTokenIds: seqPrompt(3, 20), maxTokens: 10 });
    step();
    sched.add({ id: 'long', promptTokenIds: seqPrompt(20, 40), maxTokens: 2 });
    const plan = step();
    expect(plan.rows.map((r) => [r.requestId, r.queryLen])).toEqual([
      ['a', 1],
      ['b', 1],
      ['long', 6],
    ]);
    expect(plan.numTokens).toBe(8);
    const plan2 = step();
    expect(plan2.rows.map((r) => [r.requestId, r.queryLen])).toEqual([
      ['a', 1],
      ['b', 1],
      ['long', 6],
    ]);
    // The chunk only needs logits once the prompt is complete.
    expect(plan2.logitsIndices.length).toBe(2);
  });

  it('caps one prompt per step at the long-prefill threshold', () => {
    const { sched } = setup({ maxNumBatchedTokens: 32, longPrefillTokenThreshold: 5 });
    sched.add({ id: 'x', promptTokenIds: seqPrompt(20), maxTokens: 1 });
    sched.add({ id: 'y', promptTokenIds: seqPrompt(20, 50), maxTokens: 1 });
    const plan = sched.schedule();
    expect(plan.rows.map((r) => r.queryLen)).toEqual([5, 5]);
  });

  it('never exceeds maxNumSeqs', () => {
    const { sched, step } = setup({ maxNumSeqs: 2 });
    for (let i = 0; i < 5; i++) sched.add({ id: `r${i}`, promptTokenIds: [i + 1], maxTokens: 3 });
    const plan = step();
    expect(plan.rows.length).toBe(2);
    expect(sched.metrics().numWaiting).toBe(3);
  });

  it('without chunked prefill a prompt waits until it fits whole', () => {
    const { sched } = setup({
      maxNumBatchedTokens: 16,
      maxModelLen: 16,
      enableChunkedPrefill: false,
    });
    sched.add({ id: 'a', promptTokenIds: seqPrompt(10), maxTokens: 2 });
    sched.add({ id: 'b', promptTokenIds: seqPrompt(10, 30), maxTokens: 2 });
    const plan = sched.schedule();
    expect(plan.rows.map((r) => [r.requestId, r.queryLen])).toEqual([['a', 10]]);
  });
});

describe('prefix caching', () => {
  it('takes the longest cached prefix but always computes the last prompt token', () => {
    const { sched, outputs, runAll, step } = setup();
    const prompt = seqPrompt(12); // exactly 3 blocks of 4
    sched.add({ id: 'first', promptTokenIds: prompt, maxTokens: 2 });
    runAll();
    sched.add({ id: 'again', promptTokenIds: prompt, maxTokens: 2 });
    const plan = step();
    // 2 of 3 blocks reused: the third holds the last prompt token, whose logits are needed.
    expect(plan.rows[0]!.queryLen).toBe(4);
    expect(plan.positions[0]).toBe(8);
    runAll();
    expect(outputs.get('again')!.numCachedPromptTokens).toBe(8);
    expect(Array.from(outputs.get('again')!.outputs[0]!.tokenIds)).toEqual(
      Array.from(outputs.get('first')!.outputs[0]!.tokenIds),
    );
    const m = sched.metrics();
    expect(m.prefixQueryTokens).toBe(24);
    expect(m.prefixHitTokens).toBe(8);
  });

  it('skipPrefixCache computes the whole prompt, and its blocks still serve later requests', () => {
    const { sched, outputs, runAll, step } = setup();
    const prompt = seqPrompt(12);
    sched.add({ id: 'first', promptTokenIds: prompt, maxTokens: 2 });
    runAll();
    sched.add({ id: 'scored', promptTokenIds: prompt, maxTokens: 1, skipPrefixCache: true });
    const plan = step();
    expect(plan.rows[0]!.queryLen).toBe(12);
    expect(plan.positions[0]).toBe(0);
    runAll();
    expect(outputs.get('scored')!.numCachedPromptTokens).toBe(0);
    sched.add({ id: 'later', promptTokenIds: prompt, maxTokens: 1 });
    runAll();
    expect(outputs.get('later')!.numCachedPromptTokens).toBe(8);
  });

  it('a prefix shorter than one block never hits', () => {
    const { sched, runAll, outputs } = setup();
    sched.add({ id: 'a', promptTokenIds: [1, 2, 3, 9], maxTokens: 1 });
    runAll();
    sched.add({ id: 'b', promptTokenIds: [1, 2, 3, 10], maxTokens: 1 });
    runAll();
    expect(outputs.get('b')!.numCachedPromptTokens).toBe(0);
  });

  it('does not count recompute after preemption as prefix hits (vLLM #25780)', () => {
    const { sched, runAll } = setup({ numBlocks: 6, blockSize: 4 });
    sched.add({ id: 'a', promptTokenIds: seqPrompt(9), maxTokens: 12 });
    sched.add({ id: 'b', promptTokenIds: seqPrompt(9, 40), maxTokens: 12 });
    runAll();
    const m = sched.metrics();
    expect(m.preemptionsRecompute).toBeGreaterThan(0);
    expect(m.prefixHitTokens).toBe(0);
    expect(m.recomputeHitTokens).toBeGreaterThan(0);
  });
});

describe('preemption', () => {
  it('preempts the lowest priority, then latest arrival, and the output is unchanged', () => {
    const { sched, outputs, runAll, events } = setup({ numBlocks: 8, blockSize: 4, eosTokenId: 0 });
    sched.add({
      id: 'low',
      promptTokenIds: seqPrompt(8),
      maxTokens: 14,
      priority: 5,
      arrivalTime: 0,
    });
    sched.add({ id: 'old', promptTokenIds: seqPrompt(8, 20), maxTokens: 14, arrivalTime: 0 });
    sched.add({ id: 'new', promptTokenIds: seqPrompt(8, 40), maxTokens: 14, arrivalTime: 1 });
    runAll();
    const preempts = events.filter((e) => e.type === 'preempt').map((e) => e.requestId);
    expect(preempts[0]).toBe('low');
    if (preempts.length > 1) expect(['low', 'new']).toContain(preempts[1]);
    for (const [id, start] of [
      ['low', 1],
      ['old', 20],
      ['new', 40],
    ] as const) {
      const ref = referenceOutput(SEED, VOCAB, seqPrompt(8, start), 0, 14, (t) => t === 0, 256);
      expect(Array.from(outputs.get(id)!.outputs[0]!.tokenIds)).toEqual(ref);
    }
  });

  it('resumes a recomputed parallel-sampling group that fits only because its prompt is shared', () => {
    // 12 blocks of 8. The urgent request makes the n = 2 group a victim; it comes back from
    // recompute alone with about 9 tokens per sample: 5 shared prompt blocks + 2 × 2 of its own =
    // 9 blocks. Recomputing the prompt once per sample (14 blocks, more than the cache) used to
    // end the group early with 'length'.
    const { sched, outputs, step, runAll, events } = setup({ numBlocks: 12, blockSize: 8 });
    sched.add({
      id: 'group',
      promptTokenIds: seqPrompt(42),
      maxTokens: 20,
      n: 2,
      priority: 5,
      ignoreEos: true,
    });
    for (let i = 0; i < 7; i++) step();
    sched.add({ id: 'urgent', promptTokenIds: seqPrompt(16, 100), maxTokens: 12, ignoreEos: true });
    runAll();
    expect(events.some((e) => e.type === 'preempt' && e.requestId === 'group')).toBe(true);
    const group = outputs.get('group')!;
    expect(group.reason).toBeUndefined();
    for (const o of group.outputs) expect(o.tokenIds).toHaveLength(20);
  });

  it('refuses unversioned policies and a victim that is not a candidate, naming them', () => {
    const kvCache = new KvCacheManager({ numBlocks: 4, blockSize: 4 });
    expectError(
      () =>
        new Scheduler({
          kvCache,
          maxModelLen: 64,
          queuePolicy: { name: 'old', rank: () => 0 } as never,
        }),
      'INVALID_POLICY',
      /defineQueuePolicy/,
    );
    expectError(
      () =>
        new Scheduler({
          kvCache,
          maxModelLen: 64,
          preemptionPolicy: {
            specificationVersion: 'v2',
            name: 'new',
            chooseVictim: () => '',
          } as never,
        }),
      'INVALID_POLICY',
      /"v2" is not supported/,
    );
    const { sched, step } = setup({
      numBlocks: 4,
      preemptionPolicy: definePreemptionPolicy({ name: 'wrong', chooseVictim: () => 'nobody' }),
      queuePolicy: defineQueuePolicy({ name: 'fifo', rank: (r) => r.arrivalIndex }),
    });
    sched.add({ id: 'a', promptTokenIds: seqPrompt(6), maxTokens: 20 });
    sched.add({ id: 'b', promptTokenIds: seqPrompt(6, 30), maxTokens: 20 });
    expect(() => {
      for (let i = 0; i < 40; i++) step();
    }).toThrow(/preemption policy wrong chose "nobody"/);
  });

  it('uses a custom preemption policy made by definePreemptionPolicy', () => {
    const seen: string[][] = [];
    const firstArrival = definePreemptionPolicy({
      name: 'first-arrival',
      chooseVictim(c) {
        seen.push(c.map((x) => x.requestId));
        let best = 0;
        for (let i = 1; i < c.length; i++) if (c[i]!.arrivalIndex < c[best]!.arrivalIndex) best = i;
        return c[best]!.requestId;
      },
    });
    const { sched, runAll, events } = setup({
      numBlocks: 6,
      preemptionPolicy: firstArrival,
    });
    sched.add({ id: 'a', promptTokenIds: seqPrompt(8), maxTokens: 10 });
    sched.add({ id: 'b', promptTokenIds: seqPrompt(8, 30), maxTokens: 10 });
    runAll();
    expect(seen.length).toBeGreaterThan(0);
    const first = events.find((e) => e.type === 'preempt');
    expect(first && first.type === 'preempt' && first.requestId).toBe('a');
  });

  it('swap mode moves blocks to host slots and back without recompute', () => {
    const { sched, outputs, runAll, step, kv } = setup({
      numBlocks: 6,
      blockSize: 4,
      preemptionMode: 'swap',
      hostSwapBlocks: 16,
    });
    sched.add({ id: 'a', promptTokenIds: seqPrompt(8), maxTokens: 10 });
    sched.add({ id: 'b', promptTokenIds: seqPrompt(8, 30), maxTokens: 10 });
    let sawOut: BatchPlan | undefined;
    let sawIn: BatchPlan | undefined;
    for (let i = 0; i < 100 && sched.hasUnfinished(); i++) {
      const plan = step();
      if (plan.swapOut.length && !sawOut) sawOut = plan;
      if (plan.swapIn.length && !sawIn) sawIn = plan;
    }
    runAll();
    expect(sawOut).toBeDefined();
    expect(sawIn).toBeDefined();
    // The swapped-out blocks hold b's computed tokens: 4 blocks' worth at most.
    for (const t of sawOut!.swapOut) expect(t.hostSlot).toBeLessThan(16);
    // Resumed rows are decodes, not a recompute of the whole context.
    const resumed = sawIn!.rows.find((r) => r.requestId === 'b');
    if (resumed) expect(resumed.queryLen).toBe(1);
    const m = sched.metrics();
    expect(m.preemptionsSwap).toBeGreaterThan(0);
    expect(m.preemptionsRecompute).toBe(0);
    expect(m.hostSlotsUsed).toBe(0);
    expect(kv.stats().usedBlocks).toBe(0);
    for (const [id, start] of [
      ['a', 1],
      ['b', 30],
    ] as const) {
      const ref = referenceOutput(SEED, VOCAB, seqPrompt(8, start), 0, 10, () => false, 256);
      expect(Array.from(outputs.get(id)!.outputs[0]!.tokenIds)).toEqual(ref);
    }
  });

  it('swap-in re-adopts blocks still cached on the GPU instead of copying them', () => {
    const { sched, step, runAll, outputs } = setup({
      numBlocks: 8,
      blockSize: 4,
      preemptionMode: 'swap',
      hostSwapBlocks: 16,
    });
    sched.add({ id: 'a', promptTokenIds: seqPrompt(8), maxTokens: 16 });
    sched.add({ id: 'b', promptTokenIds: seqPrompt(8, 30), maxTokens: 16 });
    let out = 0;
    let back = 0;
    for (let i = 0; i < 200 && sched.hasUnfinished(); i++) {
      const plan = step();
      out += plan.swapOut.length;
      back += plan.swapIn.length;
    }
    runAll();
    expect(out).toBeGreaterThan(0);
    // b's full blocks were freed into the prefix cache on swap-out and are still there.
    expect(back).toBeLessThan(out);
    const ref = referenceOutput(SEED, VOCAB, seqPrompt(8, 30), 0, 16, () => false, 256);
    expect(Array.from(outputs.get('b')!.outputs[0]!.tokenIds)).toEqual(ref);
  });

  it('falls back to recompute when host slots run out', () => {
    const { sched, runAll, events } = setup({
      numBlocks: 6,
      preemptionMode: 'swap',
      hostSwapBlocks: 1,
    });
    sched.add({ id: 'a', promptTokenIds: seqPrompt(8), maxTokens: 10 });
    sched.add({ id: 'b', promptTokenIds: seqPrompt(8, 30), maxTokens: 10 });
    runAll();
    const m = sched.metrics();
    expect(m.swapFallbacks).toBeGreaterThan(0);
    expect(m.preemptionsRecompute).toBe(m.swapFallbacks);
    expect(events.some((e) => e.type === 'preempt' && e.fellBackToRecompute)).toBe(true);
  });
});

describe('requests that can never fit', () => {
  it('rejects a prompt larger than the whole cache with a reason, at once', () => {
    const { sched } = setup({ numBlocks: 4, blockSize: 4 });
    sched.add({ id: 'huge', promptTokenIds: seqPrompt(17), maxTokens: 2 });
    expect(sched.hasUnfinished()).toBe(false);
    const [out] = sched.update();
    expect(out!.finishReason).toBe('rejected');
    expect(out!.reason).toMatch(/5 KV blocks.*4/);
    expect(sched.metrics().rejected).toBe(1);
  });

  it('ends a request that outgrows the cache alone instead of preempting it forever (vLLM #25538)', () => {
    const { sched, runAll, outputs, kv } = setup({ numBlocks: 4, blockSize: 4 });
    sched.add({ id: 'grow', promptTokenIds: seqPrompt(14), maxTokens: 50 });
    runAll(100);
    const out = outputs.get('grow')!;
    expect(out.finishReason).toBe('length');
    expect(out.reason).toMatch(/KV cache full/);
    expect(out.outputs[0]!.tokenIds.length).toBe(3); // 16 slots: 14 prompt + 2 cached + 1 sampled
    expect(sched.metrics().preemptionsRecompute).toBe(0);
    expect(kv.stats().usedBlocks).toBe(0);
  });
});

describe('queue policies', () => {
  it('priority: lower value first; aging lets an old request overtake', () => {
    let now = 0;
    const { sched } = setup({
      maxNumSeqs: 1,
      queuePolicy: priorityPolicy({ agingRate: 1 }),
      clock: () => now,
    });
    sched.add({ id: 'old-low', promptTokenIds: [1], maxTokens: 1, priority: 10 });
    now = 5;
    sched.add({ id: 'new-high', promptTokenIds: [2], maxTokens: 1, priority: 0 });
    // Waited 5 units: 10 − 5 = 5 > 0, the high-priority one goes first.
    expect(sched.schedule().rows[0]!.requestId).toBe('new-high');
    const { sched: s2 } = setup({
      maxNumSeqs: 1,
      queuePolicy: priorityPolicy({ agingRate: 1 }),
      clock: () => now,
    });
    now = 0;
    s2.add({ id: 'old-low', promptTokenIds: [1], maxTokens: 1, priority: 10 });
    now = 20;
    s2.add({ id: 'new-high', promptTokenIds: [2], maxTokens: 1, priority: 0 });
    // Waited 20: 10 − 20 < 0, aging wins.
    expect(s2.schedule().rows[0]!.requestId).toBe('old-low');
  });

  it('longest prefix match first, with a starvation guard and an FCFS fallback', () => {
    let now = 0;
    const make = (opts = {}) =>
      setup({ maxNumSeqs: 1, queuePolicy: longestPrefixMatchPolicy(opts), clock: () => now });
    const shared = seqPrompt(12);
    const warm = (s: ReturnType<typeof make>) => {
      s.sched.add({ id: 'seed', promptTokenIds: shared, maxTokens: 1 });
      s.runAll();
    };
    const a = make({ maxWait: 100 });
    warm(a);
    a.sched.add({ id: 'cold', promptTokenIds: seqPrompt(12, 60), maxTokens: 1 });
    a.sched.add({ id: 'hot', promptTokenIds: [...shared, 77], maxTokens: 1 });
    expect(a.sched.schedule().rows[0]!.requestId).toBe('hot');

    const b = make({ maxWait: 3 });
    warm(b);
    b.sched.add({ id: 'cold', promptTokenIds: seqPrompt(12, 60), maxTokens: 1 });
    now = 10;
    b.sched.add({ id: 'hot', promptTokenIds: [...shared, 77], maxTokens: 1 });
    expect(b.sched.schedule().rows[0]!.requestId).toBe('cold');

    now = 0;
    const c = make({ fcfsQueueLength: 1 });
    warm(c);
    c.sched.add({ id: 'cold', promptTokenIds: seqPrompt(12, 60), maxTokens: 1 });
    c.sched.add({ id: 'hot', promptTokenIds: [...shared, 77], maxTokens: 1 });
    expect(c.sched.schedule().rows[0]!.requestId).toBe('cold');
  });
});

describe('parallel sampling and beam search', () => {
  it('n > 1 forks the prompt blocks once and samples every child from the same logits row', () => {
    const { sched, kv, outputs, runAll, step } = setup({ eosTokenId: 0 });
    const prompt = seqPrompt(10);
    sched.add({ id: 'p', promptTokenIds: prompt, maxTokens: 6, n: 3 });
    const plan = step();
    expect(plan.rows.length).toBe(1);
    expect(Array.from(plan.logitsIndices)).toEqual([9, 9, 9]);
    expect(new Set(plan.sampleSeqIds).size).toBe(3);
    // Shared: 3 blocks for 10 tokens, not 9.
    expect(kv.stats().usedBlocks).toBe(3);
    const next = step();
    expect(next.rows.length).toBe(3);
    // Two children copy the shared partial block before writing into it.
    expect(next.copies.length).toBe(2);
    runAll();
    const out = outputs.get('p')!;
    expect(out.outputs.map((o) => o.index)).toEqual([0, 1, 2]);
    for (const o of out.outputs) {
      const ref = referenceOutput(SEED, VOCAB, prompt, o.index, 6, (t) => t === 0, 256);
      expect(Array.from(o.tokenIds)).toEqual(ref);
    }
    expect(kv.stats().usedBlocks).toBe(0);
  });

  it('beam search keeps the best beamWidth continuations, forking and pruning beams', () => {
    const { sched, kv } = setup({ eosTokenId: 0 });
    sched.add({ id: 'b', promptTokenIds: seqPrompt(5), maxTokens: 3, beamWidth: 2 });
    const p1 = sched.schedule();
    expect(p1.sampleSeqIds.length).toBe(1);
    // Candidates for the single beam: tokens 7 (−0.1) and 8 (−0.2).
    sched.update({
      seqIds: p1.sampleSeqIds,
      tokenIds: [0],
      beamCandidates: { k: 2, tokenIds: [7, 8], logprobs: [-0.1, -0.2] },
    });
    const p2 = sched.schedule();
    expect(p2.rows.length).toBe(2);
    expect(Array.from(p2.tokenIds).sort()).toEqual([7, 8]);
    // Beam "7" yields both best continuations; beam "8" is pruned.
    const row7 = p2.rows.findIndex((r) => p2.tokenIds[r.queryStart] === 7);
    const ids = Array.from(p2.sampleSeqIds);
    const cands = new Int32Array(4);
    const lps = new Float64Array(4);
    for (let i = 0; i < 2; i++) {
      const isSeven = p2.sampleRows[i] === row7;
      cands.set(isSeven ? [3, 4] : [5, 6], i * 2);
      lps.set(isSeven ? [-0.1, -0.2] : [-5, -6], i * 2);
    }
    const usedBefore = kv.stats().usedBlocks;
    sched.update({
      seqIds: ids,
      tokenIds: [0, 0],
      beamCandidates: { k: 2, tokenIds: cands, logprobs: lps },
    });
    expect(kv.stats().usedBlocks).toBeLessThanOrEqual(usedBefore);
    const p3 = sched.schedule();
    expect(Array.from(p3.tokenIds).sort()).toEqual([3, 4]);
    const out = sched.update({
      seqIds: p3.sampleSeqIds,
      tokenIds: [0, 0],
      beamCandidates: { k: 1, tokenIds: [9, 9], logprobs: [-1, -1] },
    });
    expect(out.length).toBe(1);
    const beams = out[0]!.outputs;
    expect(beams.map((o) => Array.from(o.tokenIds))).toEqual([
      [7, 3, 9],
      [7, 4, 9],
    ]);
    expect(beams[0]!.cumulativeLogprob).toBeCloseTo(-1.2);
    expect(kv.stats().usedBlocks).toBe(0);
  });
});

describe('update and abort', () => {
  it('applies stop token ids, EOS unless ignored, and max tokens', () => {
    const { sched } = setup({ eosTokenId: 2 });
    sched.add({ id: 'stop', promptTokenIds: [1], maxTokens: 10, stopTokenIds: [5] });
    sched.add({ id: 'eos', promptTokenIds: [1], maxTokens: 10 });
    sched.add({ id: 'ign', promptTokenIds: [1], maxTokens: 2, ignoreEos: true });
    let plan = sched.schedule();
    const byReq = (p: BatchPlan, m: Record<string, number>) =>
      Array.from(p.sampleSeqIds, (_, k) => m[p.rows[p.sampleRows[k]!]!.requestId]!);
    let out = sched.update({
      seqIds: plan.sampleSeqIds,
      tokenIds: byReq(plan, { stop: 5, eos: 2, ign: 2 }),
    });
    expect(Object.fromEntries(out.map((o) => [o.requestId, o.finishReason]))).toEqual({
      stop: 'stop',
      eos: 'stop',
    });
    expect(Array.from(out.find((o) => o.requestId === 'stop')!.outputs[0]!.tokenIds)).toEqual([5]);
    plan = sched.schedule();
    out = sched.update({ seqIds: plan.sampleSeqIds, tokenIds: [2] });
    expect(out[0]!.finishReason).toBe('length');
    expect(Array.from(out[0]!.outputs[0]!.tokenIds)).toEqual([2, 2]);
  });

  it('refuses a malformed result without changing anything', () => {
    const { sched } = setup();
    sched.add({ id: 'a', promptTokenIds: [1, 2], maxTokens: 5 });
    const plan = sched.schedule();
    expectError(() => sched.update({ seqIds: plan.sampleSeqIds, tokenIds: [] }), 'INVALID_RESULT');
    expectError(
      () => sched.update({ seqIds: plan.sampleSeqIds, tokenIds: [1.5] }),
      'INVALID_RESULT',
    );
    const id = plan.sampleSeqIds[0]!;
    expectError(() => sched.update({ seqIds: [id, id], tokenIds: [1, 1] }), 'INVALID_RESULT');
    sched.update({ seqIds: plan.sampleSeqIds, tokenIds: [3] });
    // Not waiting for a token any more until the next plan ran.
    expectError(() => sched.update({ seqIds: [id], tokenIds: [4] }), 'INVALID_RESULT');
    const next = sched.schedule();
    expect(Array.from(next.tokenIds)).toEqual([3]);
  });

  it('abort works waiting, running mid-prefill, and swapped, returning every block', () => {
    const { sched, kv, step, events } = setup({
      numBlocks: 6,
      maxNumBatchedTokens: 4,
      preemptionMode: 'swap',
      hostSwapBlocks: 8,
    });
    sched.add({ id: 'w', promptTokenIds: seqPrompt(3), maxTokens: 2, arrivalTime: 100 });
    sched.add({ id: 'a', promptTokenIds: seqPrompt(10), maxTokens: 20 });
    sched.add({ id: 'b', promptTokenIds: seqPrompt(6, 30), maxTokens: 20 });
    step();
    expect(sched.abort('w')!.finishReason).toBe('abort');
    expect(sched.abort('w')).toBeUndefined();
    // Run until one is swapped out (b, the later arrival), then abort it.
    for (let i = 0; i < 60 && sched.metrics().numSwapped === 0; i++) step();
    const pre = events.find((e) => e.type === 'preempt');
    expect(pre && pre.type === 'preempt' && pre.mode === 'swap' && pre.requestId).toBe('b');
    expect(sched.metrics().hostSlotsUsed).toBeGreaterThan(0);
    expect(sched.abort('b')!.finishReason).toBe('abort');
    expect(sched.metrics().hostSlotsUsed).toBe(0);
    // Abort mid-flight: the plan's samples for it are ignored.
    const plan = sched.schedule();
    sched.abort('a');
    expect(sched.update(new FakeExecutor(4, 1, VOCAB).run(plan))).toEqual([]);
    expect(kv.stats().usedBlocks).toBe(0);
    expect(sched.hasUnfinished()).toBe(false);
    expect(sched.metrics().aborted).toBe(3);
  });

  it('a step that failed: abort without keeping its blocks cached, and the rest runs on', () => {
    const { sched, kv, runAll, outputs } = setup({ numBlocks: 16, blockSize: 4 });
    const prompt = seqPrompt(9);
    sched.add({ id: 'failed', promptTokenIds: prompt, maxTokens: 4 });
    const plan = sched.schedule();
    expect(plan.rows.map((r) => r.requestId)).toEqual(['failed']);
    // The forward pass of this plan threw: nothing it was to write can be trusted.
    sched.abort('failed', { keepCached: false });
    expect(kv.stats()).toMatchObject({ usedBlocks: 0, cachedBlocks: 0 });
    expect(kv.findCachedPrefix(prompt).numTokens).toBe(0);
    // The same prompt afterwards computes from scratch and finishes normally.
    sched.add({ id: 'again', promptTokenIds: prompt, maxTokens: 4 });
    runAll();
    expect([...outputs.values()].map((o) => [o.requestId, o.numCachedPromptTokens])).toEqual([
      ['again', 0],
    ]);
    expect(kv.stats().usedBlocks).toBe(0);
  });

  it('reports step events and budget use', () => {
    const { sched, events, runAll } = setup({ maxNumBatchedTokens: 10 });
    sched.add({ id: 'a', promptTokenIds: seqPrompt(5), maxTokens: 3 });
    runAll();
    const steps = events.filter((e) => e.type === 'step');
    expect(steps[0]).toMatchObject({ numTokens: 5, tokenBudget: 10 });
    const m = sched.metrics();
    expect(m.steps).toBe(steps.length);
    expect(m.meanBudgetUse).toBeCloseTo((5 + 1 + 1) / 10 / steps.length);
    expect(m.finished).toBe(1);
    expect(events.some((e) => e.type === 'finish')).toBe(true);
  });
});
