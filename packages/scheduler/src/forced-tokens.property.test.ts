// Jump-forward decoding at the scheduler: tokens forced after a sample (`forcedTokenIds`) are
// appended at once and computed in the next steps as one chunk. Whatever the cache size,
// budget, preemption mode and prefix caching, the outputs must be those of a run that gets the
// same forced tokens one per step, in place of what the model would have sampled; the fake
// model's next token is a hash of the context it reads back through the block tables, so a
// forced token whose KV is missing, misplaced or lost by a preemption changes the output.
import { KvCacheManager } from '@kvasir/kv-allocator';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Scheduler } from './scheduler.js';
import { FakeExecutor } from './testing/fake-executor.js';
import { expectError, setup } from './testing/scheduler-harness.js';
import type { BatchPlan, PreemptionMode, RequestOutput, StepResult } from './types.js';

const VOCAB = 29;
const EOS = 0;

/** What a sampled token forces after it: a rule of the token, as a grammar's is of its state. */
function forcedAfter(token: number, rule: number): number[] {
  const length = (token * 7 + rule) % 5;
  if (token % 3 !== rule % 3) return [];
  return Array.from({ length }, (_, i) => 1 + ((token + i * rule) % (VOCAB - 1)));
}

const scenarioArb = fc.record({
  reqs: fc.array(
    fc.record({
      prompt: fc.array(fc.integer({ min: 1, max: VOCAB - 1 }), { minLength: 1, maxLength: 20 }),
      maxTokens: fc.integer({ min: 1, max: 24 }),
      n: fc.constantFrom(1, 1, 2),
    }),
    { minLength: 1, maxLength: 8 },
  ),
  rule: fc.integer({ min: 0, max: 8 }),
  blockSize: fc.constantFrom(2, 4),
  spareBlocks: fc.integer({ min: 0, max: 12 }),
  maxNumSeqs: fc.integer({ min: 2, max: 6 }),
  budget: fc.integer({ min: 4, max: 32 }),
  mode: fc.constantFrom<PreemptionMode>('recompute', 'swap'),
  prefixCaching: fc.boolean(),
});
type Scenario = typeof scenarioArb extends fc.Arbitrary<infer T> ? T : never;

/**
 * Runs a scenario to the end. `jump`: forced tokens go to `update` with the sample; otherwise
 * each replaces one later sample of its sequence (the token-by-token run).
 */
function runScenario(sc: Scenario, jump: boolean) {
  // Every request fits the cache alone, so none ends for want of blocks (when that happens
  // depends on the steps, which jumping changes); several at once do not, so they preempt.
  let numBlocks = 0;
  for (const r of sc.reqs) {
    numBlocks = Math.max(
      numBlocks,
      r.n * Math.ceil((r.prompt.length + r.maxTokens) / sc.blockSize),
    );
  }
  const kv = new KvCacheManager({
    numBlocks: numBlocks + sc.spareBlocks,
    blockSize: sc.blockSize,
    enablePrefixCaching: sc.prefixCaching,
  });
  const sched = new Scheduler({
    kvCache: kv,
    maxModelLen: 64,
    maxNumSeqs: sc.maxNumSeqs,
    maxNumBatchedTokens: Math.max(sc.budget, 2),
    preemptionMode: sc.mode,
    hostSwapBlocks: 64,
    enablePrefixCaching: sc.prefixCaching,
    eosTokenId: EOS,
  });
  const exec = new FakeExecutor(sc.blockSize, 7, VOCAB);
  sc.reqs.forEach((r, i) => {
    sched.add({ id: `r${i}`, promptTokenIds: r.prompt, maxTokens: r.maxTokens, n: r.n });
  });
  // Token-by-token: the forced tokens each choice still has to take, by request and index.
  const pending = new Map<string, number[]>();
  const outputs = new Map<string, RequestOutput>();
  let forcedSteps = 0;
  for (let step = 0; step < 2000 && sched.hasUnfinished(); step++) {
    const plan: BatchPlan = sched.schedule();
    const result = exec.run(plan);
    const tokenIds = Int32Array.from(result.tokenIds);
    const forced: (number[] | undefined)[] = [];
    for (let k = 0; k < tokenIds.length; k++) {
      const key = `${plan.rows[plan.sampleRows[k]!]!.requestId}/${plan.sampleIndices[k]}`;
      const queue = pending.get(key);
      if (queue && queue.length > 0) {
        tokenIds[k] = queue.shift()!;
        forcedSteps++;
        continue;
      }
      const after = forcedAfter(tokenIds[k]!, sc.rule);
      if (jump) forced[k] = after;
      else pending.set(key, after);
    }
    const stepResult: StepResult = {
      seqIds: result.seqIds,
      tokenIds,
      ...(jump ? { forcedTokenIds: forced } : {}),
    };
    for (const o of sched.update(stepResult)) outputs.set(o.requestId, o);
  }
  expect(sched.hasUnfinished()).toBe(false);
  expect(kv.stats().usedBlocks).toBe(0);
  const m = sched.metrics();
  return {
    outputs: [...outputs.values()]
      .sort((a, b) => a.requestId.localeCompare(b.requestId))
      .map((o) => ({
        id: o.requestId,
        reason: o.finishReason,
        seqs: o.outputs.map((s) => [s.finishReason, Array.from(s.tokenIds)]),
      })),
    preemptions: m.preemptionsRecompute + m.preemptionsSwap,
    steps: m.steps,
    forcedSteps,
  };
}

describe('forced tokens (jump-forward decoding)', () => {
  it('give the outputs of taking the same tokens one per step, under batching and preemption', () => {
    let preempted = 0;
    let forced = 0;
    let fewerSteps = 0;
    fc.assert(
      fc.property(scenarioArb, (sc) => {
        const jump = runScenario(sc, true);
        const byToken = runScenario(sc, false);
        expect(jump.outputs).toEqual(byToken.outputs);
        preempted += jump.preemptions;
        forced += byToken.forcedSteps;
        if (jump.steps < byToken.steps) fewerSteps++;
      }),
      { numRuns: 150 },
    );
    // Not vacuous: tokens were forced, runs preempted requests holding forced tokens not yet
    // computed, and jumping forward saved steps.
    expect(forced).toBeGreaterThan(100);
    expect(preempted).toBeGreaterThan(0);
    expect(fewerSteps).toBeGreaterThan(0);
  });

  it('computes forced tokens as one chunk after the sample and stops them at max tokens', () => {
    const { sched, kv } = setup({ eosTokenId: EOS });
    sched.add({ id: 'a', promptTokenIds: [1, 2, 3], maxTokens: 4 });
    let plan = sched.schedule();
    sched.update({ seqIds: plan.sampleSeqIds, tokenIds: [5], forcedTokenIds: [[6, 7]] });
    plan = sched.schedule();
    expect(Array.from(plan.tokenIds)).toEqual([5, 6, 7]);
    expect(Array.from(plan.positions)).toEqual([3, 4, 5]);
    expect(plan.logitsIndices.length).toBe(1);
    // The sample and the first forced token reach max tokens: the rest are not appended.
    const out = sched.update({
      seqIds: plan.sampleSeqIds,
      tokenIds: [8],
      forcedTokenIds: [[9, 10, 11]],
    });
    expect(out.map((o) => [o.finishReason, Array.from(o.outputs[0]!.tokenIds)])).toEqual([
      ['length', [5, 6, 7, 8]],
    ]);
    expect(kv.stats().usedBlocks).toBe(0);
  });

  it('refuses misaligned, bad or beam-search forced tokens without changing anything', () => {
    const { sched } = setup();
    sched.add({ id: 'a', promptTokenIds: [1, 2], maxTokens: 5 });
    let plan = sched.schedule();
    const seqIds = plan.sampleSeqIds;
    expectError(
      () => sched.update({ seqIds, tokenIds: [3], forcedTokenIds: [[4], [5]] }),
      'INVALID_RESULT',
      /align/,
    );
    expectError(
      () => sched.update({ seqIds, tokenIds: [3], forcedTokenIds: [[4, -1]] }),
      'INVALID_RESULT',
      /bad token id -1/,
    );
    sched.update({ seqIds, tokenIds: [3] });
    expect(Array.from(sched.schedule().tokenIds)).toEqual([3]);

    const beams = setup().sched;
    beams.add({ id: 'b', promptTokenIds: [1, 2], maxTokens: 5, beamWidth: 2 });
    plan = beams.schedule();
    const k = plan.sampleSeqIds.length;
    const beamCandidates = {
      k: 2,
      tokenIds: Array(2 * k).fill(3),
      logprobs: Array(2 * k).fill(-1),
    };
    expectError(
      () =>
        beams.update({
          seqIds: plan.sampleSeqIds,
          tokenIds: Array(k).fill(3),
          beamCandidates,
          forcedTokenIds: Array(k).fill([4]),
        }),
      'INVALID_RESULT',
      /beam search/,
    );
  });
});
