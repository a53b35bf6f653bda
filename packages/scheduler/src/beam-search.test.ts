import { describe, expect, it } from 'vitest';
import { seqPrompt, setup } from './testing/scheduler-harness.js';

describe('beam search', () => {
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
