import { describe, expect, it } from 'vitest';
import { referenceOutput } from './testing/fake-executor';
import { SEED, seqPrompt, setup, VOCAB } from './testing/scheduler-harness';

describe('parallel sampling (fork)', () => {
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
});
