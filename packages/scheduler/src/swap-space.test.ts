import { describe, expect, it } from 'vitest';
import { referenceOutput } from './testing/fake-executor.js';
import { SEED, seqPrompt, setup, VOCAB } from './testing/scheduler-harness.js';
import type { BatchPlan } from './types.js';

describe('swap preemption', () => {
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
