import { describe, expect, it } from 'vitest';
import { KvAllocatorError } from './errors.js';
import { KvCacheManager } from './kv-cache-manager.js';
import { LfuPolicy } from './policies/lfu-policy.js';

const range = (start: number, n: number) => Array.from({ length: n }, (_, i) => start + i);

function snapshot(m: KvCacheManager) {
  const tables: Record<string, number[]> = {};
  for (const s of m.sequences()) tables[String(s)] = [...m.blockTable(s)];
  return { stats: { ...m.stats(), prefixQueries: 0 }, tables };
}

describe('KvCacheManager', () => {
  it('maps new tokens to slots block × blockSize + offset', () => {
    const m = new KvCacheManager({ numBlocks: 8, blockSize: 4 });
    const r = m.allocateSlots('a', range(0, 6));
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    const table = m.blockTable('a');
    expect(table).toHaveLength(2);
    expect(Array.from(r.slotMapping)).toEqual([
      table[0]! * 4,
      table[0]! * 4 + 1,
      table[0]! * 4 + 2,
      table[0]! * 4 + 3,
      table[1]! * 4,
      table[1]! * 4 + 1,
    ]);
    const d = m.allocateSlots('a', [100]);
    expect(d.ok && Array.from(d.slotMapping)).toEqual([table[1]! * 4 + 2]);
    expect(m.numTokens('a')).toBe(7);
  });

  it('serves a shared prefix from cache after the first request frees it', () => {
    const m = new KvCacheManager({ numBlocks: 16, blockSize: 4 });
    const system = range(1000, 10); // two full blocks + 2 tokens
    m.allocateSlots('first', [...system, 1, 2]);
    m.free('first');
    const prompt = [...system, 7, 8, 9];
    const prefix = m.findCachedPrefix(prompt);
    expect(prefix.numTokens).toBe(8);
    expect(prefix.blocks).toHaveLength(2);
    const r = m.allocateSlots('second', prompt.slice(8), { prefix });
    expect(r.ok).toBe(true);
    expect(m.blockTable('second').slice(0, 2)).toEqual(prefix.blocks);
    expect(m.numTokens('second')).toBe(13);
    const s = m.stats();
    expect(s.prefixHitTokens).toBe(8);
    expect(s.prefixQueryTokens).toBe(13);
  });

  it('free with keepCached: false forgets the blocks only that sequence held', () => {
    const m = new KvCacheManager({ numBlocks: 16, blockSize: 4 });
    m.allocateSlots('a', range(0, 8));
    m.allocateSlots('b', [8, 9, 10, 11], { prefix: m.findCachedPrefix(range(0, 9)) });
    // b's step failed: its own full block (tokens 8..11) must not be served to anyone.
    m.free('b', { keepCached: false });
    expect(m.findCachedPrefix(range(0, 13)).numTokens).toBe(8);
    expect(m.stats()).toMatchObject({ usedBlocks: 2, cachedBlocks: 0, freeBlocks: 14 });
    // a still holds blocks 0..7, which keep their hashes and are cached once a ends normally.
    m.free('a');
    expect(m.findCachedPrefix(range(0, 9)).numTokens).toBe(8);
  });

  it('reserves blocks for externally computed KV after the local prefix, then publishes them', () => {
    const m = new KvCacheManager({ numBlocks: 8, blockSize: 4 });
    const tokens = range(0, 17); // four full blocks + 1
    m.allocateSlots('local', tokens.slice(0, 4));
    m.free('local'); // block 0 is cached locally
    const r = m.reserveExternal(tokens, { maxBlocks: 2 })!;
    expect(r.firstBlock).toBe(1);
    expect(r.blocks).toHaveLength(2);
    expect(r.hashes).toEqual(m.blockHashes(tokens).slice(1, 3));
    // Held but not findable until their content is written and committed.
    expect(m.findCachedPrefix(tokens).numTokens).toBe(4);
    expect(m.stats().usedBlocks).toBe(2);
    m.commitExternal(r);
    const hit = m.findCachedPrefix(tokens);
    expect(hit.numTokens).toBe(12);
    expect(hit.blocks.slice(1)).toEqual(r.blocks);
    expect(m.stats()).toMatchObject({ usedBlocks: 0, cachedBlocks: 3 });
    // Nothing left to reserve up to the same length; the next block is.
    expect(m.reserveExternal(tokens.slice(0, 12), { maxBlocks: 4 })).toBeUndefined();
    expect(m.reserveExternal(tokens, { maxBlocks: 4 })!.firstBlock).toBe(3);
  });

  it('abortExternal frees reserved blocks without publishing them', () => {
    const m = new KvCacheManager({ numBlocks: 4, blockSize: 4 });
    const tokens = range(0, 12);
    const r = m.reserveExternal(tokens, { maxBlocks: 8 })!;
    expect(r.blocks).toHaveLength(3);
    m.abortExternal(r);
    expect(m.findCachedPrefix(tokens).numTokens).toBe(0);
    expect(m.stats()).toMatchObject({ usedBlocks: 0, cachedBlocks: 0, freeBlocks: 4 });
  });

  it('reserveExternal never reclaims the local prefix it extends, and changes nothing without room', () => {
    const m = new KvCacheManager({ numBlocks: 2, blockSize: 4 });
    const tokens = range(0, 12);
    m.allocateSlots('a', tokens.slice(0, 8));
    m.free('a'); // both blocks cached: the local prefix of `tokens`
    const before = m.stats();
    expect(m.reserveExternal(tokens, { maxBlocks: 1 })).toBeUndefined();
    expect(m.stats()).toEqual(before);
    expect(m.findCachedPrefix(tokens).numTokens).toBe(8);
  });

  it('shares blocks of a running sequence too, by reference', () => {
    const m = new KvCacheManager({ numBlocks: 16, blockSize: 4 });
    m.allocateSlots('a', range(0, 8));
    const prefix = m.findCachedPrefix(range(0, 9));
    expect(prefix.numTokens).toBe(8);
    m.allocateSlots('b', [8], { prefix });
    expect(m.blocks.refCount(prefix.blocks[0]!)).toBe(2);
    expect(m.stats().usedBlocks).toBe(3);
  });

  it('can look up a prefix without counting it in the hit statistics', () => {
    const m = new KvCacheManager({ numBlocks: 8, blockSize: 4 });
    m.allocateSlots('a', range(0, 8));
    expect(m.findCachedPrefix(range(0, 8), undefined, { record: false }).numTokens).toBe(8);
    expect(m.stats().prefixQueries).toBe(0);
    expect(m.stats().prefixHitTokens).toBe(0);
    m.findCachedPrefix(range(0, 8));
    expect(m.stats()).toMatchObject({ prefixQueries: 1, prefixQueryTokens: 8, prefixHitTokens: 8 });
  });

  it('keeps extra keys (model, adapter, salt) apart', () => {
    const m = new KvCacheManager({ numBlocks: 16, blockSize: 4 });
    m.allocateSlots('a', range(0, 8), { extraKeys: { cacheSalt: 'tenant-a' } });
    expect(m.findCachedPrefix(range(0, 8), { cacheSalt: 'tenant-a' }).numTokens).toBe(8);
    expect(m.findCachedPrefix(range(0, 8), { cacheSalt: 'tenant-b' }).numTokens).toBe(0);
    expect(m.findCachedPrefix(range(0, 8)).numTokens).toBe(0);
  });

  it('never hits on a prefix shorter than one block', () => {
    const m = new KvCacheManager({ numBlocks: 4, blockSize: 16 });
    m.allocateSlots('a', range(0, 10));
    m.free('a');
    expect(m.findCachedPrefix(range(0, 10)).numTokens).toBe(0);
  });

  it('forks by reference and copies a shared partial block on first write', () => {
    const m = new KvCacheManager({ numBlocks: 8, blockSize: 4 });
    m.allocateSlots('p', range(0, 6));
    m.fork('p', 'c');
    const [full, partial] = m.blockTable('p');
    expect(m.blockTable('c')).toEqual([full, partial]);
    expect(m.blocks.refCount(partial!)).toBe(2);
    const r = m.allocateSlots('c', [42]);
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.copies).toHaveLength(1);
    const copy = r.copies[0]!;
    expect(copy.src).toBe(partial);
    expect(m.blockTable('c')).toEqual([full, copy.dst]);
    expect(r.slotMapping[0]).toBe(copy.dst * 4 + 2);
    // The parent now owns its partial block alone and writes in place.
    const p = m.allocateSlots('p', [43]);
    expect(p.ok && p.copies).toEqual([]);
    expect(m.blocks.refCount(full!)).toBe(2);
  });

  it('does not copy when the shared last block is full', () => {
    const m = new KvCacheManager({ numBlocks: 8, blockSize: 4 });
    m.allocateSlots('p', range(0, 8));
    m.fork('p', 'c');
    const r = m.allocateSlots('c', [1]);
    expect(r.ok && r.copies).toEqual([]);
    expect(m.blockTable('c')).toHaveLength(3);
  });

  it('reports "not enough blocks" and leaves every bit of state unchanged', () => {
    const m = new KvCacheManager({ numBlocks: 3, blockSize: 4 });
    m.allocateSlots('a', range(0, 6));
    m.fork('a', 'b');
    const before = snapshot(m);
    const r = m.allocateSlots('a', range(0, 7)); // needs CoW + 2 more = 3, has 1
    expect(r).toEqual({ ok: false, reason: 'NO_FREE_BLOCKS', blocksNeeded: 3, blocksAvailable: 1 });
    expect(m.allocateSlots('z', range(0, 13)).ok).toBe(false);
    expect(m.has('z')).toBe(false);
    expect(snapshot(m)).toEqual(before);
    expect(m.numBlocksToAllocate('a', 7)).toBe(3);
  });

  it('evicts cached blocks through the configured policy when free ones run out', () => {
    const m = new KvCacheManager({ numBlocks: 4, blockSize: 2, evictionPolicy: new LfuPolicy() });
    m.allocateSlots('hot', [1, 2]);
    m.free('hot');
    m.allocateSlots('cold', [3, 4]);
    m.free('cold');
    // A hit makes [1, 2] hotter.
    const hit = m.findCachedPrefix([1, 2, 9]);
    m.allocateSlots('reuse', [9], { prefix: hit });
    m.free('reuse');
    m.allocateSlots('big', range(100, 6)); // 3 blocks: 1 free... then the cold one goes
    expect(m.findCachedPrefix([3, 4]).numTokens).toBe(0);
    expect(m.findCachedPrefix([1, 2]).numTokens).toBe(2);
    expect(m.stats().evictions).toBeGreaterThanOrEqual(1);
  });

  it('throws typed errors for bad input and keeps state as it was', () => {
    const m = new KvCacheManager({ numBlocks: 4, blockSize: 4 });
    m.allocateSlots('a', [1, 2, 3]);
    const before = snapshot(m);
    const codeOf = (f: () => unknown) => {
      try {
        f();
      } catch (e) {
        expect(KvAllocatorError.isInstance(e)).toBe(true);
        return (e as KvAllocatorError).code;
      }
      return 'no error';
    };
    expect(codeOf(() => m.allocateSlots('a', [1.5]))).toBe('INVALID_TOKEN');
    expect(codeOf(() => m.allocateSlots('a', [-3]))).toBe('INVALID_TOKEN');
    expect(codeOf(() => m.allocateSlots('a', ['x' as unknown as number]))).toBe('INVALID_TOKEN');
    expect(codeOf(() => m.free('nope'))).toBe('UNKNOWN_SEQUENCE');
    expect(codeOf(() => m.blockTable('nope'))).toBe('UNKNOWN_SEQUENCE');
    expect(codeOf(() => m.fork('nope', 'x'))).toBe('UNKNOWN_SEQUENCE');
    expect(codeOf(() => m.fork('a', 'a'))).toBe('SEQUENCE_EXISTS');
    expect(codeOf(() => m.numBlocksToAllocate('a', -1))).toBe('INVALID_ARGUMENT');
    expect(codeOf(() => m.numBlocksToAllocate('a', 1.5))).toBe('INVALID_ARGUMENT');
    expect(
      codeOf(() =>
        m.allocateSlots('b', [1], {
          prefix: { numTokens: 4, blocks: [0], hashes: ['0'.repeat(32)] },
        }),
      ),
    ).toBe('STALE_PREFIX');
    expect(snapshot(m)).toEqual(before);
    m.free('a');
    expect(codeOf(() => m.free('a'))).toBe('DOUBLE_FREE');
    expect(codeOf(() => new KvCacheManager({ numBlocks: 0 }))).toBe('INVALID_ARGUMENT');
    expect(codeOf(() => new KvCacheManager({ numBlocks: 4, blockSize: 0 }))).toBe(
      'INVALID_ARGUMENT',
    );
  });

  it('refuses a stale prefix whose blocks were reclaimed since the lookup', () => {
    const m = new KvCacheManager({ numBlocks: 2, blockSize: 2 });
    m.allocateSlots('a', [1, 2]);
    m.free('a');
    const prefix = m.findCachedPrefix([1, 2, 3]);
    expect(m.isPrefixValid(prefix)).toBe(true);
    m.allocateSlots('b', [7, 8, 9, 10]); // takes both blocks, evicting [1, 2]
    expect(m.isPrefixValid(prefix)).toBe(false);
    expect(() => m.allocateSlots('c', [3], { prefix })).toThrow(/no longer holds/);
    expect(m.has('c')).toBe(false);
  });

  it('reports token utilization of used blocks', () => {
    const m = new KvCacheManager({ numBlocks: 8, blockSize: 4 });
    m.allocateSlots('a', range(0, 6)); // 6 of 8 slots
    m.fork('a', 'b'); // shared: still 6 of 8
    expect(m.stats().tokenUtilization).toBeCloseTo(6 / 8);
    m.allocateSlots('b', [1]); // copy: shared full block 4 + a 2 + b 3 = 9 of 12 slots
    expect(m.stats().tokenUtilization).toBeCloseTo(9 / 12);
    expect(m.stats().usedBlocks).toBe(3);
  });

  it('returns every block after everything is freed, keeping full blocks cached', () => {
    const m = new KvCacheManager({ numBlocks: 8, blockSize: 4 });
    m.allocateSlots('a', range(0, 9));
    m.fork('a', 'b');
    m.allocateSlots('b', [5, 6]);
    m.free('a');
    m.free('b');
    const s = m.stats();
    expect(s.usedBlocks).toBe(0);
    expect(s.cachedBlocks).toBe(2);
    expect(s.freeBlocks + s.cachedBlocks).toBe(8);
    expect(m.resetPrefixCache()).toBe(2);
    expect(m.stats().freeBlocks).toBe(8);
  });

  it('does nothing to the cache when prefix caching is off', () => {
    const m = new KvCacheManager({ numBlocks: 4, blockSize: 2, enablePrefixCaching: false });
    m.allocateSlots('a', [1, 2, 3, 4]);
    m.free('a');
    expect(m.findCachedPrefix([1, 2, 3, 4]).numTokens).toBe(0);
    expect(m.stats().freeBlocks).toBe(4);
  });
});
