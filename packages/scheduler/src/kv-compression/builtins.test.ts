import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type ReferencePolicy, referenceKept } from '../testing/kv-compression-reference.js';
import { expectError } from '../testing/scheduler-harness.js';
import { h2oPolicy, sinksPolicy, snapkvPolicy, windowPolicy } from './builtins.js';
import type { KvCompressionPolicy, KvCompressionView } from './policy.js';

function build(p: ReferencePolicy): KvCompressionPolicy {
  if (p.name === 'window') return windowPolicy(p);
  if (p.name === 'sinks') return sinksPolicy(p);
  if (p.name === 'h2o') return h2oPolicy(p);
  return snapkvPolicy(p);
}

const policyArb: fc.Arbitrary<ReferencePolicy> = fc.oneof(
  fc.record({ name: fc.constant('window' as const), window: fc.integer({ min: 1, max: 40 }) }),
  fc.record({
    name: fc.constant('sinks' as const),
    sinks: fc.integer({ min: 1, max: 10 }),
    window: fc.integer({ min: 1, max: 40 }),
  }),
  fc.record(
    {
      name: fc.constant('h2o' as const),
      budget: fc.integer({ min: 1, max: 40 }),
      recent: fc.constantFrom(0.1, 0.25, 0.5, 1),
    },
    { requiredKeys: ['name', 'budget'] },
  ),
  fc.record(
    {
      name: fc.constant('snapkv' as const),
      budget: fc.integer({ min: 1, max: 40 }),
      observation: fc.integer({ min: 1, max: 12 }),
    },
    { requiredKeys: ['name', 'budget'] },
  ),
);

/**
 * A cache as compression leaves it: the prompt's blocks (some dropped) then generated ones,
 * the last one filling; small integer scores so ties happen.
 */
const viewArb: fc.Arbitrary<KvCompressionView> = fc
  .record({
    blockSize: fc.constantFrom(1, 2, 4, 8),
    kept: fc.array(fc.boolean(), { minLength: 1, maxLength: 16 }),
    lastFill: fc.nat(),
    promptBlocks: fc.nat({ max: 16 }),
    promptCut: fc.nat(),
    scores: fc.array(fc.integer({ min: 0, max: 4 }), { minLength: 17, maxLength: 17 }),
  })
  .map(({ blockSize: bs, kept, lastFill, promptBlocks, promptCut, scores }) => {
    const starts: number[] = [];
    kept.forEach((k, i) => {
      if (k || i === kept.length - 1) starts.push(i * bs);
    });
    const n = starts.length;
    const fill = 1 + (lastFill % bs);
    const total = (kept.length - 1) * bs + fill;
    const promptTokens = Math.max(1, Math.min(total, promptBlocks * bs + (promptCut % bs)));
    return {
      blockSize: bs,
      numBlocks: n,
      numTokens: (n - 1) * bs + fill,
      totalTokens: total,
      promptTokens,
      prefillDone: total >= promptTokens,
      blockScores: Float32Array.from(scores.slice(0, n)),
      blockStarts: Int32Array.from(starts),
    };
  });

describe('built-in KV compression policies', () => {
  it('keep exactly the blocks their references keep, never the last, within maxBlocks', () => {
    fc.assert(
      fc.property(policyArb, viewArb, (p, v) => {
        if (p.name === 'sinks') {
          // The sinks policy never drops its sinks: a cache it left still starts with them.
          const sinkBlocks = Math.min(v.numBlocks, Math.ceil(p.sinks / v.blockSize));
          for (let i = 0; i < sinkBlocks; i++) fc.pre(v.blockStarts[i] === i * v.blockSize);
        }
        const policy = build(p);
        const dropped = policy.select(v);
        expect(new Set(dropped).size).toBe(dropped.length);
        for (const i of dropped) expect(i >= 0 && i < v.numBlocks - 1).toBe(true);
        const kept = new Set([...Array(v.numBlocks).keys()].filter((i) => !dropped.includes(i)));
        expect(kept).toEqual(referenceKept(p, v));
        if (policy.attention !== 'prefill-end' || v.prefillDone) {
          expect(kept.size).toBeLessThanOrEqual(Math.max(1, policy.maxBlocks(v.blockSize)));
        }
      }),
      { numRuns: 2000 },
    );
  });

  const view = (scores: number[], bs = 4, prompt = 100): KvCompressionView => ({
    blockSize: bs,
    numBlocks: scores.length,
    numTokens: scores.length * bs,
    totalTokens: scores.length * bs,
    promptTokens: prompt,
    prefillDone: scores.length * bs >= prompt,
    blockScores: Float32Array.from(scores),
    blockStarts: Int32Array.from(scores.map((_, i) => i * bs)),
  });

  it('sinks keeps the first blocks and the window; window alone drops the first', () => {
    const v = view([0, 0, 0, 0, 0, 0, 0, 0]);
    expect(sinksPolicy({ sinks: 4, window: 8 }).select(v)).toEqual([1, 2, 3, 4, 5]);
    expect(windowPolicy({ window: 9 }).select(v)).toEqual([0, 1, 2, 3, 4]);
    expect(sinksPolicy({ sinks: 4, window: 8 }).maxBlocks(4)).toBe(3);
  });

  it('h2o keeps its heavy hitters next to the recent half', () => {
    // budget 16 tokens = 4 blocks: the last 2, and of the others the two that scored most.
    const v = view([9, 1, 7, 0, 3, 2, 5, 0]);
    expect(h2oPolicy({ budget: 16 }).select(v)).toEqual([1, 3, 4, 5]);
  });

  it('snapkv keeps the prompt blocks the observation window attended to, then slides', () => {
    // 6 prompt blocks of 4 (24 tokens), observation 4 = the last prompt block; budget 3 blocks.
    const atEnd = view([1, 8, 2, 9, 3, 4], 4, 24);
    expect(snapkvPolicy({ budget: 12, observation: 4 }).select(atEnd)).toEqual([0, 2, 4]);
    expect(snapkvPolicy({ budget: 12, observation: 4 }).select(view([1, 8, 2], 4, 24))).toEqual([]);
  });

  it('refuses parameters that are not positive integers, naming them', () => {
    expectError(() => windowPolicy({ window: 0 }), 'INVALID_ARGUMENT', /window: window/);
    expectError(() => sinksPolicy({ sinks: 1.5, window: 8 }), 'INVALID_ARGUMENT', /sinks/);
    expectError(() => h2oPolicy({ budget: 8, recent: 0 }), 'INVALID_ARGUMENT', /recent/);
    expectError(() => snapkvPolicy({ budget: 8, observation: -1 }), 'INVALID_ARGUMENT', /obs/);
  });
});
