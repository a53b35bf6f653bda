// kvSnapshot against a real allocator and scheduler under random traffic: its picture of the
// pool must be the allocator's own (counts, reference counts, block tables) after every change.
import { KvCacheManager } from '@kvasir/kv-allocator';
import { Scheduler } from '@kvasir/scheduler';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { blockState, kvSnapshot } from './kv-snapshot.js';

type Action =
  | { kind: 'add'; prefix: number; suffix: number; n: number; maxTokens: number }
  | { kind: 'step' }
  | { kind: 'abort'; pick: number };

const action: fc.Arbitrary<Action> = fc.oneof(
  fc.record({
    kind: fc.constant('add' as const),
    prefix: fc.integer({ min: 0, max: 2 }),
    suffix: fc.integer({ min: 1, max: 9 }),
    n: fc.integer({ min: 1, max: 3 }),
    maxTokens: fc.integer({ min: 1, max: 12 }),
  }),
  fc.constant({ kind: 'step' as const }),
  fc.constant({ kind: 'step' as const }),
  fc.record({ kind: fc.constant('abort' as const), pick: fc.nat() }),
);

/** Three system prompts of 8 tokens (two blocks of 4) that requests start with. */
const PREFIXES = [0, 1, 2].map((p) => Array.from({ length: 8 }, (_, i) => 100 * (p + 1) + i));

function checkSnapshot(kv: KvCacheManager, sched: Scheduler, live: Set<string>): void {
  const snap = kvSnapshot(kv, sched);
  const stats = kv.stats();
  const count = { free: 0, cached: 0, used: 0, shared: 0 };
  for (let b = 0; b < kv.numBlocks; b++) count[blockState(snap, b)]++;
  expect(count.used + count.shared).toBe(stats.usedBlocks);
  expect(count.cached).toBe(stats.cachedBlocks);
  expect(count.free).toBe(stats.freeBlocks);
  expect(new Set(snap.requests.map((r) => r.id))).toEqual(live);
  // Every reference a block has is one block table's: the tables account for all of them.
  const held = new Array<number>(kv.numBlocks).fill(0);
  for (const r of snap.requests) for (const s of r.seqs) for (const b of s.blocks) held[b]!++;
  expect(held).toEqual(snap.refCounts);
  expect(snap.counters.evictions).toBe(stats.evictions);
  expect(snap.counters.prefixHitTokens).toBe(stats.prefixHitTokens);
}

describe('kvSnapshot', () => {
  it('draws the pool as the allocator holds it, under random adds, steps and aborts', () => {
    fc.assert(
      fc.property(fc.array(action, { minLength: 1, maxLength: 60 }), (actions) => {
        const kv = new KvCacheManager({ numBlocks: 24, blockSize: 4 });
        const sched = new Scheduler({ kvCache: kv, maxModelLen: 64, maxNumSeqs: 8 });
        const live = new Set<string>();
        let next = 0;
        let token = 0;
        for (const a of actions) {
          if (a.kind === 'add') {
            const id = `r${next++}`;
            const suffix = Array.from({ length: a.suffix }, (_, i) => 1 + ((next * 7 + i) % 50));
            sched.add({
              id,
              promptTokenIds: [...PREFIXES[a.prefix]!, ...suffix],
              maxTokens: a.maxTokens,
              n: a.n,
            });
            live.add(id);
          } else if (a.kind === 'abort') {
            const ids = [...live];
            if (ids.length === 0) continue;
            const id = ids[a.pick % ids.length]!;
            sched.abort(id);
            live.delete(id);
          } else {
            const plan = sched.schedule();
            const seqIds = plan.sampleSeqIds;
            const tokenIds = Int32Array.from(seqIds, () => 1 + (token++ % 50));
            for (const out of sched.update({ seqIds, tokenIds })) live.delete(out.requestId);
          }
          // Prompts of at most 5 blocks always fit the 24: no request is refused.
          checkSnapshot(kv, sched, live);
        }
      }),
      { numRuns: 150 },
    );
  });

  it('shows a system prompt two requests share as shared blocks, and cached after both end', () => {
    const kv = new KvCacheManager({ numBlocks: 16, blockSize: 4 });
    const sched = new Scheduler({ kvCache: kv, maxModelLen: 64, maxNumSeqs: 4 });
    const first = { id: 'a', promptTokenIds: [...PREFIXES[0]!, 1, 2], maxTokens: 2 };
    sched.add(first);
    let plan = sched.schedule();
    sched.update({
      seqIds: plan.sampleSeqIds,
      tokenIds: Int32Array.from(plan.sampleSeqIds, () => 3),
    });
    sched.add({ id: 'b', promptTokenIds: [...PREFIXES[0]!, 4, 5], maxTokens: 2 });
    plan = sched.schedule();
    let snap = kvSnapshot(kv, sched);
    const table = (id: string) => snap.requests.find((r) => r.id === id)!.seqs[0]!.blocks;
    // The two full system-prompt blocks are in both tables; each request has its own tail.
    expect(table('a').slice(0, 2)).toEqual(table('b').slice(0, 2));
    expect(table('a')[2]).not.toBe(table('b')[2]);
    for (const b of table('a').slice(0, 2)) expect(blockState(snap, b)).toBe('shared');
    expect(blockState(snap, table('b')[2]!)).toBe('used');
    expect(snap.requests.find((r) => r.id === 'b')!.cachedPromptTokens).toBe(8);
    const prefixBlocks = table('a').slice(0, 2);
    sched.abort('a');
    sched.abort('b');
    snap = kvSnapshot(kv, sched);
    expect(snap.requests).toEqual([]);
    for (const b of prefixBlocks) expect(blockState(snap, b)).toBe('cached');
    expect(snap.counters.prefixHitTokens).toBe(8);
  });
});
