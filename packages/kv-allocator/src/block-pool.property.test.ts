import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { BlockPool } from './block-pool.js';
import type { KvAllocatorError } from './errors.js';
import { KvCacheManager } from './kv-cache-manager.js';
import { defineEvictionPolicy, type EvictionPolicy } from './policies/eviction-policy.js';
import { LruPolicy } from './policies/lru-policy.js';

type Fault = 'throw' | 'bad-victim' | 'used-victim' | 'none';

/**
 * An LRU policy that misbehaves at its `failAt`-th hook call: throws from that hook, or (at a
 * `chooseVictim`) names a block id that does not exist or one that is in use.
 */
function flakyPolicy(failAt: number, fault: Fault, usedBlock: () => number): EvictionPolicy {
  const lru = new LruPolicy<number>();
  let calls = 0;
  const misbehave = () => calls++ === failAt && fault !== 'none';
  return defineEvictionPolicy<number>({
    name: 'flaky',
    insert: (k) => {
      if (misbehave()) throw new Error('insert');
      lru.insert(k);
    },
    touch: (k) => {
      if (misbehave()) throw new Error('touch');
      lru.touch(k);
    },
    remove: (k) => {
      if (misbehave()) throw new Error('remove');
      lru.remove(k);
    },
    forget: () => {
      if (misbehave()) throw new Error('forget');
    },
    chooseVictim: () => {
      if (misbehave()) {
        if (fault === 'bad-victim') return 999_999;
        if (fault === 'used-victim') return usedBlock();
        throw new Error('chooseVictim');
      }
      return lru.chooseVictim();
    },
  });
}

type Op =
  | { kind: 'new'; tokens: number[]; usePrefix: boolean }
  | { kind: 'append'; pick: number; tokens: number[] }
  | { kind: 'fork'; pick: number }
  | { kind: 'free'; pick: number; keepCached: boolean };

const tokenArb = fc.integer({ min: 0, max: 2 });
const opArb: fc.Arbitrary<Op> = fc.oneof(
  fc.record({
    kind: fc.constant('new' as const),
    tokens: fc.array(tokenArb, { minLength: 1, maxLength: 12 }),
    usePrefix: fc.boolean(),
  }),
  fc.record({
    kind: fc.constant('append' as const),
    pick: fc.nat(),
    tokens: fc.array(tokenArb, { minLength: 1, maxLength: 5 }),
  }),
  fc.record({ kind: fc.constant('fork' as const), pick: fc.nat() }),
  fc.record({ kind: fc.constant('free' as const), pick: fc.nat(), keepCached: fc.boolean() }),
);

describe('BlockPool with an eviction policy that misbehaves once, at a random call', () => {
  it('never throws for it, never loses or double-frees a block, and reports it once', () => {
    fc.assert(
      fc.property(
        fc.array(opArb, { maxLength: 60 }),
        fc.integer({ min: 2, max: 8 }),
        fc.nat({ max: 40 }),
        fc.constantFrom<Fault>('throw', 'bad-victim', 'used-victim', 'none'),
        (ops, numBlocks, failAt, fault) => {
          let kv: KvCacheManager | undefined;
          const failures: KvAllocatorError[] = [];
          const usedBlock = () => {
            for (const id of kv!.sequences()) return kv!.blockTable(id)[0] ?? 0;
            return 0;
          };
          kv = new KvCacheManager({
            numBlocks,
            blockSize: 2,
            evictionPolicy: flakyPolicy(failAt, fault, usedBlock),
            onEvictionPolicyFailure: (e) => failures.push(e),
          });
          const live: number[] = [];
          let next = 0;
          for (const op of ops) {
            if (op.kind === 'new') {
              const id = next++;
              const prefix = op.usePrefix ? kv.findCachedPrefix(op.tokens) : undefined;
              const r = kv.allocateSlots(id, op.tokens, prefix ? { prefix } : {});
              if (r.ok) live.push(id);
            } else if (live.length > 0) {
              const i = op.pick % live.length;
              const id = live[i]!;
              if (op.kind === 'append') kv.allocateSlots(id, op.tokens);
              else if (op.kind === 'fork') {
                kv.fork(id, next);
                live.push(next++);
              } else {
                kv.free(id, { keepCached: op.keepCached });
                live.splice(i, 1);
              }
            }
            const b = kv.blocks;
            expect(b.numFree + b.numCached + b.numUsed).toBe(numBlocks);
            // Reference counts are exactly the live block tables' references.
            const refs = new Int32Array(numBlocks);
            for (const id of live) for (const blk of kv.blockTable(id)) refs[blk]!++;
            for (let blk = 0; blk < numBlocks; blk++) expect(b.refCount(blk)).toBe(refs[blk]);
            expect(b.numUsed).toBe(refs.filter((r) => r > 0).length);
          }
          expect(failures.length).toBeLessThanOrEqual(1);
          if (fault === 'none') expect(failures).toHaveLength(0);
          for (const id of live) kv.free(id);
          expect(kv.blocks.numUsed).toBe(0);
          // Everything cached is still reclaimable: the whole pool can be taken at once.
          expect(kv.allocateSlots(next, new Array(numBlocks * 2).fill(9)).ok).toBe(true);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('a pool on its own keeps its counts through a policy throwing from every hook', () => {
    const angry = defineEvictionPolicy<number>({
      name: 'angry',
      insert() {
        throw new Error('no');
      },
      touch() {
        throw new Error('no');
      },
      remove() {
        throw new Error('no');
      },
      chooseVictim() {
        throw new Error('no');
      },
    });
    const pool = new BlockPool({ numBlocks: 4, evictionPolicy: angry });
    const blocks = pool.allocate(4)!;
    for (const [i, b] of blocks.entries()) pool.setHash(b, `h${i}`);
    for (const b of blocks) pool.release(b);
    pool.retain(blocks[1]!);
    expect(pool.allocate(3)).toHaveLength(3);
    expect(pool.numUsed).toBe(4);
    expect(pool.policyFailure?.code).toBe('POLICY_VIOLATION');
  });
});
