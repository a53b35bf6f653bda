import {
  defineEvictionPolicy,
  type EvictionPolicy,
  KvCacheManager,
  LruPolicy,
} from '@kvasir/kv-allocator';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SchedulerError } from './errors.js';
import { windowPolicy } from './kv-compression/builtins.js';
import { defineKvCompressionPolicy } from './kv-compression/policy.js';
import { Scheduler } from './scheduler.js';
import { FakeExecutor } from './testing/fake-executor.js';

// Users' policies that throw at random calls, or name blocks that do not exist, driven through
// the real scheduler and allocator: planning never throws for them, only the requests a
// compression policy decided for are named, and when everything has ended no block is held.

/** An LRU that misbehaves at the call numbers in `faults` (throws, or names block 999999). */
function flakyEviction(faults: ReadonlySet<number>): EvictionPolicy {
  const lru = new LruPolicy<number>();
  let calls = 0;
  const bad = () => faults.has(calls++);
  return defineEvictionPolicy<number>({
    name: 'flaky-eviction',
    insert: (k) => {
      if (bad()) throw new Error('insert');
      lru.insert(k);
    },
    touch: (k) => {
      if (bad()) throw new Error('touch');
      lru.touch(k);
    },
    remove: (k) => {
      if (bad()) throw new Error('remove');
      lru.remove(k);
    },
    chooseVictim: () => (bad() ? 999_999 : lru.chooseVictim()),
  });
}

interface Req {
  readonly prompt: number[];
  readonly maxTokens: number;
  readonly compression: 'none' | 'window' | 'flaky';
}

const reqArb: fc.Arbitrary<Req> = fc.record({
  // Shared starts make prefix hits (touch) frequent; a 32-block cache makes eviction frequent.
  prompt: fc
    .tuple(fc.nat({ max: 2 }), fc.array(fc.nat({ max: 40 }), { minLength: 1, maxLength: 30 }))
    .map(([p, rest]) => [...Array.from({ length: 8 }, (_, i) => p * 8 + i), ...rest]),
  maxTokens: fc.integer({ min: 1, max: 40 }),
  compression: fc.constantFrom('none' as const, 'window' as const, 'flaky' as const),
});

describe('Scheduler with plug-ins that fail at random calls', () => {
  it('never fails a plan, names only the requests a failing compression policy decided, leaks no block', () => {
    fc.assert(
      fc.property(
        fc.array(reqArb, { minLength: 1, maxLength: 10 }),
        fc.uniqueArray(fc.nat({ max: 300 }), { maxLength: 4 }),
        fc.uniqueArray(fc.nat({ max: 200 }), { maxLength: 4 }),
        (reqs, evictionFaults, selectFaults) => {
          const blockSize = 4;
          const kv = new KvCacheManager({
            numBlocks: 32,
            blockSize,
            evictionPolicy: flakyEviction(new Set(evictionFaults)),
          });
          let selects = 0;
          const faults = new Set(selectFaults);
          const flaky = defineKvCompressionPolicy({
            name: 'flaky',
            attention: 'none',
            maxBlocks: () => 4,
            select(v) {
              if (faults.has(selects++)) throw new Error('select');
              const drop: number[] = [];
              for (let i = 0; i < v.numBlocks - 4; i++) drop.push(i);
              return drop;
            },
          });
          const sched = new Scheduler({
            kvCache: kv,
            maxModelLen: 128,
            maxNumBatchedTokens: 48,
          });
          const exec = new FakeExecutor(blockSize, 7, 50);
          exec.checkCachePositions = () => true;
          const ended = new Set<string>();
          reqs.forEach((r, i) => {
            sched.add({
              id: `r${i}`,
              promptTokenIds: r.prompt,
              maxTokens: r.maxTokens,
              ignoreEos: true,
              ...(r.compression === 'none'
                ? {}
                : {
                    kvCompression: {
                      policy: r.compression === 'flaky' ? flaky : windowPolicy({ window: 16 }),
                      positions: 'cache' as const,
                    },
                  }),
            });
          });
          for (let step = 0; step < 2000 && sched.hasUnfinished(); step++) {
            const plan = sched.schedule(); // must never throw
            let outputs: { requestId: string }[];
            try {
              outputs = sched.update(exec.run(plan));
            } catch (error) {
              expect(SchedulerError.isInstance(error)).toBe(true);
              const e = error as SchedulerError;
              expect(e.code).toBe('INVALID_POLICY');
              const ids = e.details?.requestIds as string[];
              expect(ids.length).toBeGreaterThan(0);
              for (const id of ids) {
                // Only requests using the failing policy are named.
                expect(reqs[Number(id.slice(1))]!.compression).toBe('flaky');
                sched.abort(id, { keepCached: false });
                ended.add(id);
              }
              outputs = sched.update();
            }
            for (const o of outputs) ended.add(o.requestId);
            const b = kv.blocks;
            expect(b.numFree + b.numCached + b.numUsed).toBe(32);
          }
          expect(sched.hasUnfinished()).toBe(false);
          expect(kv.stats().usedBlocks).toBe(0);
          expect(ended.size).toBe(reqs.length);
          // Every cached block is still reclaimable: the whole pool can be taken at once.
          expect(kv.allocateSlots(-1, new Array(32 * blockSize).fill(1)).ok).toBe(true);
        },
      ),
      { numRuns: 60 },
    );
  });
});
