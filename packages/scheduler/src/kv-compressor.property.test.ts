import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { h2oPolicy, sinksPolicy, snapkvPolicy, windowPolicy } from './kv-compression/builtins.js';
import type { KvCompressionSpec } from './kv-compression/parse.js';
import { defineKvCompressionPolicy, type KvCompressionPolicy } from './kv-compression/policy.js';
import { seqPrompt, setup } from './testing/scheduler-harness.js';

const MODEL_LEN = 48;

/** A scoring policy of no sense at all: drops pseudo-random middle blocks, any of them. */
function scatterPolicy(keep: number): KvCompressionPolicy {
  return defineKvCompressionPolicy({
    name: 'scatter',
    attention: 'decode',
    maxBlocks: () => keep,
    select(v) {
      const out: number[] = [];
      for (let i = 0; i < v.numBlocks - 1; i++) {
        if (((v.blockStarts[i]! * 7 + v.totalTokens + Math.round(v.blockScores[i]!)) & 3) === 0) {
          out.push(i);
        }
      }
      return out;
    },
  });
}

const policyArb = (bs: number): fc.Arbitrary<KvCompressionPolicy> =>
  fc.oneof(
    fc.integer({ min: 2, max: 6 }).map((b) => windowPolicy({ window: b * bs - 1 })),
    fc
      .record({ s: fc.integer({ min: 1, max: 2 * bs }), w: fc.integer({ min: 1, max: 4 * bs }) })
      .map(({ s, w }) => sinksPolicy({ sinks: s, window: w })),
    fc
      .record({ b: fc.integer({ min: bs + 1, max: 8 * bs }), r: fc.constantFrom(0.25, 0.5, 1) })
      .map(({ b, r }) => h2oPolicy({ budget: b, recent: r })),
    fc
      .record({ b: fc.integer({ min: bs + 1, max: 8 * bs }), o: fc.integer({ min: 1, max: 12 }) })
      .map(({ b, o }) => snapkvPolicy({ budget: b, observation: o })),
    fc.integer({ min: 2, max: 6 }).map(scatterPolicy),
  );

const requestArb = (bs: number) =>
  fc.record({
    policy: fc.option(policyArb(bs), { nil: undefined, freq: 4 }),
    positions: fc.constantFrom('cache' as const, 'original' as const),
    promptLen: fc.integer({ min: 1, max: 100 }),
    maxTokens: fc.integer({ min: 1, max: 120 }),
    n: fc.constantFrom(1, 1, 2),
    arrival: fc.nat({ max: 20 }),
    abortAt: fc.option(fc.nat({ max: 80 }), { nil: undefined, freq: 3 }),
  });

describe('KV compression invariants under random workloads', () => {
  it('held blocks stay within maxBlocks after every step, tables compact, positions exact, nothing leaks', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(2, 4),
        fc.integer({ min: 12, max: 40 }),
        fc.constantFrom('recompute' as const, 'swap' as const),
        fc.integer({ min: 8, max: 32 }),
        fc.array(fc.nat(), { minLength: 1, maxLength: 6 }),
        (bs, numBlocks, preemptionMode, budget, seeds) =>
          runWorkload(bs, numBlocks, preemptionMode, budget, seeds),
      ),
      { numRuns: 60 },
    );
  });
});

/** Requests drawn from `seeds` (deterministic per seed), then run to the end with checks. */
function runWorkload(
  bs: number,
  numBlocks: number,
  preemptionMode: 'recompute' | 'swap',
  budget: number,
  seeds: number[],
): void {
  const requests = seeds.map((seed) => fc.sample(requestArb(bs), { seed, numRuns: 1 })[0]!);
  const h = setup({
    numBlocks,
    blockSize: bs,
    maxModelLen: MODEL_LEN,
    maxNumBatchedTokens: budget,
    preemptionMode,
    hostSwapBlocks: 16,
  });
  const specs = new Map<string, KvCompressionSpec>();
  h.exec.checkCachePositions = (id) => specs.get(id)?.positions === 'cache';
  const pending = requests.map((r, i) => ({ ...r, id: `r${i}` }));
  const added = new Set<string>();
  const ended = new Map<string, number>();
  const owner = new Map<number, string>();
  for (let step = 0; step < 3000; step++) {
    for (const r of pending) {
      if (added.has(r.id) || r.arrival > step) continue;
      added.add(r.id);
      const spec = r.policy ? { policy: r.policy, positions: r.positions } : undefined;
      const maxPrompt =
        spec?.positions === 'cache' && spec.policy.attention !== 'prefill-end' ? 100 : MODEL_LEN;
      const req = {
        id: r.id,
        promptTokenIds: seqPrompt(Math.min(r.promptLen, maxPrompt), 1 + (r.promptLen % 7)),
        maxTokens: r.maxTokens,
        n: r.n,
        ignoreEos: true,
        ...(spec ? { kvCompression: spec } : {}),
      };
      try {
        h.sched.add(req);
        if (spec) specs.set(r.id, spec);
      } catch (e) {
        // A policy too big for the context in 'cache' positions is refused at add: fine.
        expect((e as Error).message).toMatch(/kvCompression/);
        ended.set(r.id, 1);
      }
    }
    for (const r of pending) {
      if (r.abortAt === step && added.has(r.id) && h.sched.abort(r.id)) {
        ended.set(r.id, (ended.get(r.id) ?? 0) + 1);
      }
    }
    if (!h.sched.hasUnfinished() && added.size === pending.length) {
      // Requests rejected at `add` are reported by the next update.
      for (const o of h.sched.update()) ended.set(o.requestId, (ended.get(o.requestId) ?? 0) + 1);
      break;
    }
    const plan = h.sched.schedule();
    for (const row of plan.rows) owner.set(row.seqId, row.requestId);
    for (const o of h.sched.update(h.exec.run(plan))) {
      ended.set(o.requestId, (ended.get(o.requestId) ?? 0) + 1);
    }
    const decoded = new Set(plan.rows.filter((r) => !r.isPrefill).map((r) => r.seqId));
    for (const seq of h.kv.sequences()) {
      const table = h.kv.blockTable(seq);
      expect(table.length).toBe(Math.ceil(h.kv.numTokens(seq) / bs));
      const spec = specs.get(owner.get(Number(seq)) ?? '');
      if (!spec) continue;
      if (spec.policy.attention !== 'prefill-end' || decoded.has(Number(seq))) {
        expect(table.length).toBeLessThanOrEqual(spec.policy.maxBlocks(bs));
      }
    }
  }
  expect(h.sched.hasUnfinished()).toBe(false);
  for (const r of pending) expect(ended.get(r.id)).toBe(1);
  expect(h.kv.stats().usedBlocks).toBe(0);
}
