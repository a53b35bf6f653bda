import { describe, expect, it } from 'vitest';
import { BlockPool } from './block-pool.js';
import { KvAllocatorError } from './errors.js';
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

  it('reports a policy that names a block it may not reclaim, without losing blocks', () => {
    const liar = defineEvictionPolicy<number>({
      name: 'liar',
      insert() {},
      touch() {},
      remove() {},
      chooseVictim: () => 0,
    });
    const pool = new BlockPool({ numBlocks: 2, evictionPolicy: liar });
    const [a, b] = pool.allocate(2)!;
    pool.setHash(b!, 'hb');
    pool.release(b!);
    // Block 0 is in use, so choosing it violates the contract.
    expect(() => pool.allocate(1)).toThrow(KvAllocatorError);
    expect(pool.refCount(a!)).toBe(1);
    expect(pool.numFree + pool.numCached + pool.numUsed).toBe(2);
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
