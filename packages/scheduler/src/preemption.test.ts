import { KvCacheManager } from '@kvasir/kv-allocator';
import { describe, expect, it } from 'vitest';
import { definePreemptionPolicy, defineQueuePolicy } from './policies.js';
import { Scheduler } from './scheduler.js';
import { referenceOutput } from './testing/fake-executor.js';
import { expectError, SEED, seqPrompt, setup, VOCAB } from './testing/scheduler-harness.js';

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
