import { describe, expect, it } from 'vitest';
import { kvGroupLayout } from './group-layout.js';
import { KvCacheManager } from './kv-cache-manager.js';

/** A sliding table after blocks 0 and 1 fell out of the window. */
const TWO_HOLES_THEN_THREE = [-1, -1, expect.any(Number), expect.any(Number), expect.any(Number)];

const range = (n: number, from = 0) => Array.from({ length: n }, (_, i) => from + i);

describe('KvCacheManager with a sliding-window group', () => {
  // Group 0: full attention; group 1: window 8 (blocks of 4).
  const make = (numBlocks = 64) =>
    new KvCacheManager({ numBlocks, blockSize: 4, groups: [{}, { window: 8 }] });

  it('releases the blocks a decode no longer reads, leaving holes, and counts them', () => {
    const kv = make();
    const r = kv.allocateSlots('s', range(16));
    expect(r.ok && r.slotMappings.length).toBe(2);
    // A 16-token prefill holds 4 blocks in each group.
    expect(kv.stats().usedBlocks).toBe(8);
    kv.allocateSlots('s', [16]); // query at 16 reads 9..16: blocks 0 and 1 are out
    expect(kv.blockTables('s')[1]).toEqual(TWO_HOLES_THEN_THREE);
    expect(kv.blockTables('s')[0]).not.toContain(-1);
    for (let t = 17; t < 64; t++) kv.allocateSlots('s', [t]);
    const s = kv.stats();
    // The full group holds all 16 blocks; the sliding group the 2 its last query (63) read:
    // positions 56..63.
    expect(s.groups.map((g) => g.blocks)).toEqual([16, 2]);
    expect(s.groups.map((g) => g.tokens)).toEqual([64, 8]);
    expect(s.groups[1]!.releasedBlocks).toBe(14);
    expect(s.usedBlocks).toBe(18);
  });

  it('admits a step that only fits once the window released blocks, and refuses one that does not', () => {
    // 8 blocks, all taken by the prefill: the full group's new block comes from the release.
    const kv = make(8);
    expect(kv.allocateSlots('s', range(16)).ok).toBe(true);
    expect(kv.numBlocksToAllocate('s', 1)).toBe(0); // +1 full, +1 sliding, −2 released
    expect(kv.allocateSlots('s', [16]).ok).toBe(true);
    const before = kv.stats();
    const r = kv.allocateSlots('s', range(12, 17));
    expect(r.ok).toBe(false);
    expect(kv.stats()).toEqual(before);
    expect(kv.blockTables('s')[1]).toEqual(TWO_HOLES_THEN_THREE);
  });

  it('serves a prefix hit from the window blocks alone after the head was reclaimed', () => {
    const kv = make(12);
    const prompt = range(24);
    kv.allocateSlots('a', prompt);
    kv.free('a'); // 12 cached blocks: 6 per group
    // Another request takes 2 blocks: LRU reclaims the full group's last two (freed first).
    kv.allocateSlots('b', range(4, 1000));
    const p = kv.findCachedPrefix([...prompt, 99]);
    // 16 tokens: the full group's first 4 blocks, and of the sliding group only blocks 2 and 3
    // (the query at 16 reads 9..16).
    expect(p.numTokens).toBe(16);
    expect(p.groups![0]!.blocks.every((b) => b >= 0)).toBe(true);
    expect(p.groups![1]!.blocks.slice(0, 2)).toEqual([-1, -1]);
    expect(p.groups![1]!.blocks.slice(2).every((b) => b >= 0)).toBe(true);
    expect(kv.isPrefixValid(p)).toBe(true);
    const r = kv.allocateSlots('c', [99], { prefix: p });
    expect(r.ok).toBe(true);
    expect(kv.blockTables('c')[1]!.slice(0, 2)).toEqual([-1, -1]);
  });

  it('finds a hit whose sliding head blocks are gone (vLLM finds the same), and not one whose window is', () => {
    const kv = make(64);
    kv.allocateSlots('a', range(24));
    kv.allocateSlots('a', [24]); // releases sliding blocks 0..3 (cached, unreferenced)
    kv.resetPrefixCache(); // drops the released (cached) sliding blocks only
    kv.free('a');
    // The full group has all 6 blocks; the sliding group only 4 and 5 (positions 16..23):
    // a 24-token hit needs 17..23, so it is served.
    const p = kv.findCachedPrefix([...range(24), 7]);
    expect(p.numTokens).toBe(24);
    expect(p.groups![1]!.blocks.slice(0, 4)).toEqual([-1, -1, -1, -1]);
    // A 16-token hit would need sliding block 2 (positions 9..15), which is gone.
    expect(kv.findCachedPrefix(range(17)).numTokens).toBe(0);
  });

  it('refuses a prefix sliced by hand and token-level compression, naming why', () => {
    const kv = make();
    kv.allocateSlots('a', range(16));
    kv.free('a');
    const p = kv.findCachedPrefix(range(17));
    const sliced = { numTokens: 8, blocks: p.blocks.slice(0, 2), hashes: p.hashes.slice(0, 2) };
    expect(() => kv.allocateSlots('b', [1], { prefix: sliced })).toThrow(/maxBlocks/);
    expect(kv.findCachedPrefix(range(17), undefined, { maxBlocks: 2 }).numTokens).toBe(8);
    kv.allocateSlots('c', range(9));
    expect(() => kv.dropBlocks('c', [0])).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
    );
  });

  it('refuses a window that is not a positive integer', () => {
    expect(() => new KvCacheManager({ numBlocks: 4, groups: [{ window: 0 }] })).toThrow(
      /groups\[0\]\.window/,
    );
    expect(() => new KvCacheManager({ numBlocks: 4, groups: [] })).toThrow(/non-empty/);
  });
});

describe('kvGroupLayout', () => {
  it('splits Gemma 3 1B into one global group and six sliding groups of 4, the last padded', () => {
    const windows = Array.from({ length: 26 }, (_, l) => (l % 6 < 5 ? 512 : null));
    const g = kvGroupLayout(windows);
    expect(g.layersPerGroup).toBe(4);
    expect(g.groups).toEqual([{ window: null }, ...new Array(6).fill({ window: 512 })]);
    expect([5, 11, 17, 23].map((l) => g.layerGroup[l])).toEqual([0, 0, 0, 0]);
    expect([5, 11, 17, 23].map((l) => g.layerSlot[l])).toEqual([0, 1, 2, 3]);
    expect([0, 1, 2, 3, 4, 6].map((l) => g.layerGroup[l])).toEqual([1, 1, 1, 1, 2, 2]);
    expect(g.layerGroup[25]).toBe(6);
    // Every (group, slot) pair is one layer's.
    const pairs = new Set(windows.map((_, l) => `${g.layerGroup[l]}/${g.layerSlot[l]}`));
    expect(pairs.size).toBe(26);
  });

  it('keeps one group of every layer when no layer slides', () => {
    const g = kvGroupLayout([null, null, null]);
    expect(g).toEqual({
      layersPerGroup: 3,
      groups: [{ window: null }],
      layerGroup: [0, 0, 0],
      layerSlot: [0, 1, 2],
    });
  });
});
