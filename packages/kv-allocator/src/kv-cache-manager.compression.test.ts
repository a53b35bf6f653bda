import { describe, expect, it } from 'vitest';
import { KvAllocatorError } from './errors.js';
import { KvCacheManager } from './kv-cache-manager.js';

const range = (start: number, n: number) => Array.from({ length: n }, (_, i) => start + i);

function expectCode(fn: () => unknown, code: string, match?: RegExp): void {
  try {
    fn();
  } catch (e) {
    expect(KvAllocatorError.isInstance(e)).toBe(true);
    expect((e as KvAllocatorError).code).toBe(code);
    if (match) expect((e as Error).message).toMatch(match);
    return;
  }
  throw new Error(`expected KvAllocatorError ${code}`);
}

describe('KvCacheManager.dropBlocks', () => {
  it('compacts the table, keeps order and counts tokens down by whole blocks', () => {
    const m = new KvCacheManager({ numBlocks: 16, blockSize: 4 });
    m.allocateSlots('a', range(0, 18)); // 5 blocks, the last holding 2 tokens
    const table = [...m.blockTable('a')];
    m.dropBlocks('a', [3, 1]);
    expect(m.blockTable('a')).toEqual([table[0], table[2], table[4]]);
    expect(m.numTokens('a')).toBe(10);
    expect(m.stats()).toMatchObject({ usedBlocks: 3, droppedBlocks: 2, compressedSequences: 1 });
    // The next token lands after the kept tail's 2 tokens.
    const r = m.allocateSlots('a', [99]);
    expect(r.ok && Array.from(r.slotMapping)).toEqual([table[4]! * 4 + 2]);
  });

  it('keeps a dropped full block cached (its content is still what its hash names)', () => {
    const m = new KvCacheManager({ numBlocks: 16, blockSize: 4 });
    m.allocateSlots('a', range(0, 13));
    m.dropBlocks('a', [0]);
    expect(m.stats()).toMatchObject({ usedBlocks: 3, cachedBlocks: 1 });
    expect(m.findCachedPrefix(range(0, 5)).numTokens).toBe(4);
  });

  it('publishes no block that fills after the first drop, and free caches only blocks before it', () => {
    const m = new KvCacheManager({ numBlocks: 32, blockSize: 4 });
    m.allocateSlots('a', range(0, 17)); // blocks 0..3 full and hashed, block 4 holds 1 token
    m.dropBlocks('a', [2]); // table: old 0, 1, 3, 4
    m.allocateSlots('a', range(17, 7)); // fills old block 4 and a new one
    const table = [...m.blockTable('a')];
    expect(table).toHaveLength(5);
    expect(m.blocks.hashOf(table[3]!)).toBeUndefined();
    expect(m.blocks.hashOf(table[4]!)).toBeUndefined();
    m.free('a');
    // The blocks before the first dropped index and the dropped block stay findable; old
    // block 3, kept after the drop, is freed.
    expect(m.findCachedPrefix(range(0, 30)).numTokens).toBe(12);
    expect(m.blocks.hashOf(table[2]!)).toBeUndefined();
    expect(m.stats()).toMatchObject({ usedBlocks: 0, compressedSequences: 0 });
  });

  it('a fork inherits compression; the parent frees what only it holds', () => {
    const m = new KvCacheManager({ numBlocks: 32, blockSize: 4 });
    m.allocateSlots('a', range(0, 10));
    m.dropBlocks('a', [0]);
    m.fork('a', 'b');
    m.allocateSlots('b', range(50, 6));
    expect(m.blocks.hashOf(m.blockTable('b')[1]!)).toBeUndefined();
    m.free('a');
    m.free('b');
    expect(m.stats().usedBlocks).toBe(0);
  });

  it('refuses the last block, repeats, out-of-range and non-integer indices, changing nothing', () => {
    const m = new KvCacheManager({ numBlocks: 16, blockSize: 4 });
    m.allocateSlots('a', range(0, 12));
    const before = { table: [...m.blockTable('a')], stats: m.stats() };
    expectCode(() => m.dropBlocks('a', [2]), 'INVALID_ARGUMENT', /last block/);
    expectCode(() => m.dropBlocks('a', [0, 0]), 'INVALID_ARGUMENT', /listed twice/);
    expectCode(() => m.dropBlocks('a', [0, 5]), 'INVALID_ARGUMENT', /past the block table/);
    expectCode(() => m.dropBlocks('a', [1.5]), 'INVALID_ARGUMENT', /not a block index/);
    expectCode(() => m.dropBlocks('a', [-1]), 'INVALID_ARGUMENT');
    expectCode(() => m.dropBlocks('zz', [0]), 'UNKNOWN_SEQUENCE');
    expect({ table: [...m.blockTable('a')], stats: m.stats() }).toEqual(before);
    m.dropBlocks('a', []);
    expect(m.stats().compressedSequences).toBe(0);
  });
});

describe('KvCacheManager.prepareRewrite', () => {
  it('copies a block shared with another sequence and leaves the other one untouched', () => {
    const m = new KvCacheManager({ numBlocks: 16, blockSize: 4 });
    m.allocateSlots('a', range(0, 9));
    m.fork('a', 'b');
    const shared = [...m.blockTable('a')];
    const copies = m.prepareRewrite('a', [1, 2]);
    const mine = m.blockTable('a');
    expect(copies).toEqual([
      { src: shared[1], dst: mine[1] },
      { src: shared[2], dst: mine[2] },
    ]);
    expect(mine[0]).toBe(shared[0]);
    expect(m.blockTable('b')).toEqual(shared);
    expect(m.blocks.hashOf(mine[1]!)).toBeUndefined();
    expect(m.blocks.refCount(shared[1]!)).toBe(1);
    expect(m.stats().rewriteCopies).toBe(2);
  });

  it('unpublishes a hashed block only this sequence holds, without copying', () => {
    const m = new KvCacheManager({ numBlocks: 16, blockSize: 4 });
    m.allocateSlots('a', range(0, 9));
    const table = [...m.blockTable('a')];
    expect(m.prepareRewrite('a', [1])).toEqual([]);
    expect(m.blockTable('a')).toEqual(table);
    expect(m.blocks.hashOf(table[1]!)).toBeUndefined();
    expect(m.findCachedPrefix(range(0, 9), undefined, { record: false }).numTokens).toBe(4);
    m.free('a');
    // Block 1 was rewritten: it is freed, not cached; block 0 stays cached.
    expect(m.stats()).toMatchObject({ cachedBlocks: 1, freeBlocks: 15 });
  });

  it('adopts a cached prefix block, then copies it rather than rewriting the cached content', () => {
    const m = new KvCacheManager({ numBlocks: 16, blockSize: 4 });
    m.allocateSlots('a', range(0, 5));
    const prefix = m.findCachedPrefix(range(0, 6));
    m.allocateSlots('b', [4, 5], { prefix });
    const copies = m.prepareRewrite('b', [0]);
    expect(copies).toHaveLength(1);
    expect(copies[0]!.src).toBe(prefix.blocks[0]);
    // a's block still serves the prefix.
    expect(m.findCachedPrefix(range(0, 6), undefined, { record: false }).numTokens).toBe(4);
  });

  it('throws OUT_OF_BLOCKS and changes nothing when the copies do not fit', () => {
    const m = new KvCacheManager({ numBlocks: 3, blockSize: 4 });
    m.allocateSlots('a', range(0, 9));
    m.fork('a', 'b');
    const before = { a: [...m.blockTable('a')], stats: m.stats() };
    expectCode(() => m.prepareRewrite('a', [0]), 'OUT_OF_BLOCKS', /needs 1 copies/);
    expect({ a: [...m.blockTable('a')], stats: m.stats() }).toEqual(before);
    expectCode(() => m.prepareRewrite('a', [3]), 'INVALID_ARGUMENT', /past the block table/);
    expectCode(() => m.prepareRewrite('a', [1, 1]), 'INVALID_ARGUMENT', /listed twice/);
  });

  it('may rewrite the last block (the window moves over it too)', () => {
    const m = new KvCacheManager({ numBlocks: 8, blockSize: 4 });
    m.allocateSlots('a', range(0, 6));
    m.fork('a', 'b');
    const copies = m.prepareRewrite('a', [1]);
    expect(copies).toHaveLength(1);
    // The copy is private now: appending needs no copy-on-write.
    const r = m.allocateSlots('a', [7]);
    expect(r.ok && r.copies).toEqual([]);
  });
});
