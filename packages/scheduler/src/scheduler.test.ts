// The Scheduler's own contract: what add() refuses, update() and abort().
import { describe, expect, it } from 'vitest';
import { FakeExecutor } from './testing/fake-executor.js';
import { expectError, seqPrompt, setup, VOCAB } from './testing/scheduler-harness.js';
import type { BatchPlan, SchedulerRequest } from './types.js';

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
