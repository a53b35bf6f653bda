import { KvCacheManager } from '@kvasir/kv-allocator';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { longestPrefixMatchPolicy, priorityPolicy } from './policies.js';
import { Scheduler } from './scheduler.js';
import { FakeExecutor, referenceOutput } from './testing/fake-executor.js';
import type { PreemptionMode, RequestOutput } from './types.js';

const VOCAB = 23;
const EOS = 0;
const SEED = 1234;

interface Req {
  prompt: number[];
  maxTokens: number;
  n: number;
  beamWidth: number;
  priority: number;
  arriveAt: number;
  abortAt: number; // -1: never
}

const reqArb = (shared: number[][]) =>
  fc.record({
    prefixPick: fc.integer({ min: -1, max: shared.length - 1 }),
    tail: fc.array(fc.integer({ min: 1, max: VOCAB - 1 }), { minLength: 1, maxLength: 24 }),
    maxTokens: fc.integer({ min: 1, max: 14 }),
    n: fc.constantFrom(1, 1, 1, 2, 3),
    beamWidth: fc.constantFrom(0, 0, 0, 0, 2, 3),
    priority: fc.integer({ min: 0, max: 2 }),
    arriveAt: fc.integer({ min: 0, max: 30 }),
    abortAt: fc.oneof(fc.constant(-1), fc.constant(-1), fc.integer({ min: 0, max: 60 })),
  });

const SHARED = [
  [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14],
  [5, 5, 5, 5, 6, 6, 6, 6],
];

const scenarioArb = fc.record({
  reqs: fc.array(reqArb(SHARED), { minLength: 1, maxLength: 14 }),
  blockSize: fc.constantFrom(2, 4, 8),
  numBlocks: fc.integer({ min: 6, max: 40 }),
  maxNumSeqs: fc.integer({ min: 1, max: 8 }),
  budget: fc.integer({ min: 4, max: 48 }),
  chunked: fc.boolean(),
  mode: fc.constantFrom<PreemptionMode>('recompute', 'swap'),
  hostSwapBlocks: fc.integer({ min: 0, max: 40 }),
  prefixCaching: fc.boolean(),
  queue: fc.constantFrom('fcfs', 'priority', 'lpm'),
  watermark: fc.constantFrom(0, 0.1),
});

const MAX_MODEL_LEN = 64;

type Scenario = typeof scenarioArb extends fc.Arbitrary<infer T> ? T : never;

function toReqs(raw: Scenario['reqs']): Req[] {
  return raw.map((r) => ({
    prompt: [...(r.prefixPick >= 0 ? SHARED[r.prefixPick]! : []), ...r.tail],
    maxTokens: r.maxTokens,
    n: r.n,
    beamWidth: r.beamWidth,
    priority: r.priority,
    arriveAt: r.arriveAt,
    abortAt: r.abortAt,
  }));
}

function run(sc: Scenario, reqs: Req[]) {
  const kv = new KvCacheManager({
    numBlocks: sc.numBlocks,
    blockSize: sc.blockSize,
    enablePrefixCaching: sc.prefixCaching,
  });
  const budget = sc.chunked ? sc.budget : Math.max(sc.budget, MAX_MODEL_LEN);
  const sched = new Scheduler({
    kvCache: kv,
    maxModelLen: MAX_MODEL_LEN,
    maxNumSeqs: sc.maxNumSeqs,
    maxNumBatchedTokens: budget,
    enableChunkedPrefill: sc.chunked,
    preemptionMode: sc.mode,
    hostSwapBlocks: sc.hostSwapBlocks,
    eosTokenId: EOS,
    admissionWatermark: sc.watermark,
    ...(sc.queue === 'priority' ? { queuePolicy: priorityPolicy({ agingRate: 0.1 }) } : {}),
    ...(sc.queue === 'lpm'
      ? { queuePolicy: longestPrefixMatchPolicy({ maxWait: 20, fcfsQueueLength: 6 }) }
      : {}),
  });
  const exec = new FakeExecutor(sc.blockSize, SEED, VOCAB);
  const ends = new Map<string, RequestOutput[]>();
  const record = (o: RequestOutput) => {
    const list = ends.get(o.requestId) ?? [];
    list.push(o);
    ends.set(o.requestId, list);
  };
  let step = 0;
  let maxRows = 0;
  let maxTokens = 0;
  let swapIns = 0;
  while (step < 3000) {
    for (let i = 0; i < reqs.length; i++) {
      const r = reqs[i]!;
      if (r.arriveAt === step) {
        sched.add({
          id: `r${i}`,
          promptTokenIds: r.prompt,
          maxTokens: r.maxTokens,
          ...(r.beamWidth > 0 && r.beamWidth <= sc.maxNumSeqs
            ? { beamWidth: r.beamWidth }
            : { n: Math.min(r.n, sc.maxNumSeqs) }),
          priority: r.priority,
        });
      }
      if (r.abortAt === step) {
        const o = sched.abort(`r${i}`);
        if (o) record(o);
      }
    }
    const plan = sched.schedule();
    maxRows = Math.max(maxRows, plan.rows.length);
    maxTokens = Math.max(maxTokens, plan.numTokens);
    expect(plan.numTokens).toBeLessThanOrEqual(budget);
    expect(plan.rows.length).toBeLessThanOrEqual(sc.maxNumSeqs);
    swapIns += plan.swapIn.length;
    const res = exec.run(plan);
    for (const o of sched.update(res)) record(o);
    step++;
    if (step > 60 && !sched.hasUnfinished()) break;
  }
  return { sched, kv, ends, steps: step, swapIns };
}

describe('Scheduler properties (random arrivals, lengths, aborts, tiny caches)', () => {
  it('respects limits, leaks nothing, ends every request once, and preemption never changes output', () => {
    let preemptions = { recompute: 0, swap: 0 };
    let swapIns = 0;
    let compared = 0;
    let beams = 0;
    let beamsPreempted = 0;
    let comparedPreempted = 0;
    fc.assert(
      fc.property(scenarioArb, (sc) => {
        const reqs = toReqs(sc.reqs);
        const { sched, kv, ends, steps, swapIns: sIn } = run(sc, reqs);
        // Beam search has no closed-form reference: compare with the same requests on a cache
        // large enough that nothing is ever preempted.
        const hasBeams = reqs.some((r) => r.beamWidth > 0 && r.beamWidth <= sc.maxNumSeqs);
        const roomy = hasBeams ? run({ ...sc, numBlocks: 4000 }, reqs).ends : undefined;
        swapIns += sIn;
        expect(steps).toBeLessThan(3000); // no livelock
        expect(sched.hasUnfinished()).toBe(false);
        expect(kv.stats().usedBlocks).toBe(0);
        expect(kv.stats().numSequences).toBe(0);
        expect(sched.metrics().hostSlotsUsed).toBe(0);
        const m = sched.metrics();
        preemptions = {
          recompute: preemptions.recompute + m.preemptionsRecompute,
          swap: preemptions.swap + m.preemptionsSwap,
        };
        for (let i = 0; i < reqs.length; i++) {
          const list = ends.get(`r${i}`) ?? [];
          expect(list.length, `request r${i} ends exactly once`).toBe(1);
          const o = list[0]!;
          if (o.finishReason === 'rejected') expect(o.reason).toBeTruthy();
          if (o.finishReason === 'abort' || o.finishReason === 'rejected') continue;
          if (o.reason !== undefined) continue; // cut short by cache capacity
          const r = reqs[i]!;
          if (r.beamWidth > 0 && r.beamWidth <= sc.maxNumSeqs) {
            // Beam search: outputs are ordered best first and no longer than maxTokens.
            expect(o.outputs.length).toBeGreaterThan(0);
            expect(o.outputs.length).toBeLessThanOrEqual(r.beamWidth);
            for (let j = 1; j < o.outputs.length; j++) {
              expect(o.outputs[j]!.cumulativeLogprob).toBeLessThanOrEqual(
                o.outputs[j - 1]!.cumulativeLogprob,
              );
            }
            for (const out of o.outputs)
              expect(out.tokenIds.length).toBeLessThanOrEqual(r.maxTokens);
            const alone = roomy?.get(`r${i}`)?.[0];
            if (alone && alone.finishReason !== 'abort' && alone.reason === undefined) {
              expect(o.outputs.map((x) => Array.from(x.tokenIds))).toEqual(
                alone.outputs.map((x) => Array.from(x.tokenIds)),
              );
              beams++;
              if (o.numPreemptions > 0) beamsPreempted++;
            }
            continue;
          }
          for (const out of o.outputs) {
            const ref = referenceOutput(
              SEED,
              VOCAB,
              r.prompt,
              out.index,
              r.maxTokens,
              (t) => t === EOS,
              MAX_MODEL_LEN,
            );
            expect(Array.from(out.tokenIds)).toEqual(ref);
            compared++;
            if (o.numPreemptions > 0) comparedPreempted++;
          }
        }
      }),
      { numRuns: 300, seed: 42 },
    );
    // The scenarios must actually exercise both preemption modes.
    expect(preemptions.recompute).toBeGreaterThan(0);
    expect(preemptions.swap).toBeGreaterThan(0);
    expect(swapIns).toBeGreaterThan(0);
    expect(beams).toBeGreaterThan(20);
    expect(beamsPreempted).toBeGreaterThan(0);
    expect(compared).toBeGreaterThan(500);
    expect(comparedPreempted).toBeGreaterThan(30);
  });
});
