import { describe, expect, it } from 'vitest';
import { BlockPool } from './block-pool.js';
import type { KvAllocatorError } from './errors.js';
import { defineEvictionPolicy } from './policies/eviction-policy.js';
import { FifoPolicy } from './policies/fifo-policy.js';

describe('BlockPool', () => {
  it('hands out free blocks first and keeps freed hashed blocks cached', () => {
    const pool = new BlockPool({ numBlocks: 4 });
    const [a, b] = pool.allocate(2)!;
    expect([a, b]).toEqual([0, 1]);
    pool.setHash(a!, 'h-a');
    pool.release(a!); // hashed: cached, not free
    pool.release(b!); // unhashed: free
    expect(pool.numCached).toBe(1);
    expect(pool.numFree).toBe(3);
    expect(pool.lookup('h-a')).toBe(a);
    // Three free blocks are used before the cached one is reclaimed.
    const three = pool.allocate(3)!;
    expect(three).not.toContain(a);
    expect(pool.lookup('h-a')).toBe(a);
    const [last] = pool.allocate(1)!;
    expect(last).toBe(a);
    expect(pool.lookup('h-a')).toBeUndefined();
    expect(pool.evictions).toBe(1);
  });

  it('returns undefined and changes nothing when blocks run out', () => {
    const pool = new BlockPool({ numBlocks: 2 });
    pool.allocate(1);
    expect(pool.allocate(2)).toBeUndefined();
    expect(pool.numFree).toBe(1);
    expect(pool.numUsed).toBe(1);
  });

  it('reclaims cached blocks in the order the policy says', () => {
    const pool = new BlockPool({ numBlocks: 3, evictionPolicy: new FifoPolicy() });
    const blocks = pool.allocate(3)!;
    blocks.forEach((b, i) => {
      pool.setHash(b, `h${i}`);
    });
    pool.release(blocks[2]!);
    pool.release(blocks[0]!);
    pool.release(blocks[1]!);
    pool.retain(blocks[2]!); // a hit takes block 2 out of the policy
    expect(pool.allocate(1)).toEqual([blocks[0]]);
    expect(pool.allocate(1)).toEqual([blocks[1]]);
    expect(pool.allocate(1)).toBeUndefined();
  });

  it('works with a user policy made by defineEvictionPolicy (most recently freed first)', () => {
    const stack: number[] = [];
    const mru = defineEvictionPolicy<number>({
      name: 'mru',
      insert: (k) => stack.push(k),
      touch: () => {},
      remove: (k) => {
        const i = stack.indexOf(k);
        if (i >= 0) stack.splice(i, 1);
      },
      chooseVictim: () => stack[stack.length - 1],
    });
    const pool = new BlockPool({ numBlocks: 3, evictionPolicy: mru });
    const blocks = pool.allocate(3)!;
    blocks.forEach((b, i) => {
      pool.setHash(b, `h${i}`);
    });
    for (const b of blocks) pool.release(b);
    expect(pool.allocate(1)).toEqual([blocks[2]]);
    expect(pool.lookup('h2')).toBeUndefined();
    expect(pool.lookup('h0')).toBe(blocks[0]);
  });

  it('replaces a policy that names a block it may not reclaim by LRU, losing no block', () => {
    const liar = defineEvictionPolicy<number>({
      name: 'liar',
      insert() {},
      touch() {},
      remove() {},
      chooseVictim: () => 0,
    });
    const failures: KvAllocatorError[] = [];
    const pool = new BlockPool({
      numBlocks: 2,
      evictionPolicy: liar,
      onPolicyFailure: (e) => failures.push(e),
    });
    const [a, b] = pool.allocate(2)!;
    pool.setHash(b!, 'hb');
    pool.release(b!);
    // Block 0 is in use, so choosing it violates the contract: LRU picks the cached block 1.
    expect(pool.allocate(1)).toEqual([b]);
    expect(pool.refCount(a!)).toBe(1);
    expect(pool.numFree + pool.numCached + pool.numUsed).toBe(2);
    expect(failures).toHaveLength(1);
    expect(failures[0]!.code).toBe('POLICY_VIOLATION');
    expect(failures[0]!.message).toMatch(/liar chose 0, .* using the built-in lru/);
    expect(pool.policy.name).toBe('lru');
    expect(pool.policyFailure).toBe(failures[0]);
  });

  it('finishes a release whose policy throws from insert, and reclaims that block later', () => {
    const failures: KvAllocatorError[] = [];
    const pool = new BlockPool({
      numBlocks: 3,
      evictionPolicy: defineEvictionPolicy<number>({
        name: 'bug',
        insert() {
          throw new Error('bug');
        },
        touch() {},
        remove() {},
        chooseVictim: () => undefined,
      }),
      onPolicyFailure: (e) => failures.push(e),
    });
    const blocks = pool.allocate(3)!;
    for (const [i, b] of blocks.entries()) pool.setHash(b, `h${i}`);
    for (const b of blocks) pool.release(b); // the first insert throws; every release completes
    expect(pool.numCached).toBe(3);
    expect(pool.numUsed).toBe(0);
    expect(failures).toHaveLength(1);
    expect(failures[0]!.message).toMatch(/bug threw from insert: bug/);
    // All three are reclaimable through the fallback, and none twice.
    expect(new Set(pool.allocate(3))).toEqual(new Set(blocks));
    expect(pool.numUsed).toBe(3);
    for (const b of blocks) pool.release(b);
    expect(() => pool.release(blocks[0]!)).toThrow(/released more often/);
  });

  it('finishes a cache hit and an eviction whose policy throws from touch, remove or forget', () => {
    for (const hook of ['touch', 'remove', 'forget', 'chooseVictim'] as const) {
      const order: number[] = [];
      const hooks = {
        name: `bad-${hook}`,
        insert: (k: number) => void order.push(k),
        touch: () => {},
        remove: (k: number) => void order.splice(order.indexOf(k) >>> 0, 1),
        forget: () => {},
        chooseVictim: () => order[0],
      };
      hooks[hook] = () => {
        throw new Error(hook);
      };
      let failures = 0;
      const pool = new BlockPool({
        numBlocks: 2,
        evictionPolicy: defineEvictionPolicy<number>(hooks),
        onPolicyFailure: () => failures++,
      });
      const [a, b] = pool.allocate(2)!;
      pool.setHash(a!, 'ha');
      pool.setHash(b!, 'hb');
      pool.release(a!);
      pool.release(b!);
      pool.retain(a!); // a hit: touch, remove
      expect(pool.refCount(a!)).toBe(1);
      expect(pool.numCached).toBe(1);
      expect(pool.allocate(1)).toEqual([b]); // an eviction: chooseVictim, remove, forget
      expect(pool.lookup('hb')).toBeUndefined();
      expect(pool.numUsed).toBe(2);
      expect(failures).toBe(1);
    }
  });

  it('keeps one block per content hash', () => {
    const pool = new BlockPool({ numBlocks: 2 });
    const [a, b] = pool.allocate(2)!;
    pool.setHash(a!, 'same');
    pool.setHash(b!, 'same');
    expect(pool.hashOf(b!)).toBeUndefined();
    pool.release(b!);
    expect(pool.numFree).toBe(1);
  });

  it('detects a release without a matching retain', () => {
    const pool = new BlockPool({ numBlocks: 1 });
    const [a] = pool.allocate(1)!;
    pool.release(a!);
    expect(() => pool.release(a!)).toThrow(/released more often/);
  });

  it('unpublish takes a used block out of the index, so it is freed and not cached', () => {
    const pool = new BlockPool({ numBlocks: 2 });
    const [a] = pool.allocate(1)!;
    pool.setHash(a!, 'ha');
    pool.unpublish(a!);
    expect(pool.lookup('ha')).toBeUndefined();
    pool.release(a!);
    expect([pool.numFree, pool.numCached]).toEqual([2, 0]);
    expect(() => pool.unpublish(a!)).toThrow(/not in use/);
  });
});
