import { describe, expect, it } from 'vitest';
import { referenceOutput } from './testing/fake-executor.js';
import { SEED, seqPrompt, setup, VOCAB } from './testing/scheduler-harness.js';

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
