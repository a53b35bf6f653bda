import { describe, expect, it } from 'vitest';
import { seqPrompt, setup } from './testing/scheduler-harness.js';

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
