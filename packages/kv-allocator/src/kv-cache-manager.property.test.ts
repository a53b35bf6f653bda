import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { KvCacheManager } from './kv-cache-manager.js';
import { createEvictionPolicy } from './policies/registry.js';
import type { SeqId } from './types.js';

type Op =
  | { kind: 'new'; tokens: number[]; usePrefix: boolean }
  | { kind: 'append'; pick: number; tokens: number[] }
  | { kind: 'fork'; pick: number }
  | { kind: 'free'; pick: number }
  | { kind: 'fail'; pick: number; tokens: number[] }
  | { kind: 'drop'; pick: number; blocks: number[] }
  | { kind: 'rewrite'; pick: number; blocks: number[] };

// A small vocabulary and shared starts make prefix hits frequent.
const tokenArb = fc.integer({ min: 0, max: 3 });
const opArb: fc.Arbitrary<Op> = fc.oneof(
  fc.record({
    kind: fc.constant('new' as const),
    tokens: fc.array(tokenArb, { minLength: 1, maxLength: 20 }),
    usePrefix: fc.boolean(),
  }),
  fc.record({
    kind: fc.constant('append' as const),
    pick: fc.nat(),
    tokens: fc.array(tokenArb, { minLength: 1, maxLength: 6 }),
  }),
  fc.record({ kind: fc.constant('fork' as const), pick: fc.nat() }),
  fc.record({ kind: fc.constant('free' as const), pick: fc.nat() }),
  // A step that allocated slots and then failed before writing them (copies included).
  fc.record({
    kind: fc.constant('fail' as const),
    pick: fc.nat(),
    tokens: fc.array(tokenArb, { minLength: 1, maxLength: 12 }),
  }),
  // Token-level compression: drop non-tail blocks; rewrite blocks in place (a RoPE key shift).
  fc.record({
    kind: fc.constant('drop' as const),
    pick: fc.nat(),
    blocks: fc.array(fc.nat(), { maxLength: 4 }),
  }),
  fc.record({
    kind: fc.constant('rewrite' as const),
    pick: fc.nat(),
    blocks: fc.array(fc.nat(), { maxLength: 3 }),
  }),
);

/** Distinct picks reduced into [0, n), in pick order. */
function distinctIndices(picks: readonly number[], n: number): number[] {
  return n <= 0 ? [] : [...new Set(picks.map((p) => p % n))];
}

/**
 * Runs random operations against a manager while a fake device memory records which token was
 * written into which slot (and applies the returned copy-on-write copies). After every step it
 * checks the structural invariants and that every sequence reads back exactly its own tokens.
 *
 * Memory also records whether a slot is "clean": written by a sequence that never dropped or
 * rewrote a block (its KV was computed with the whole context its hash chain names) and never
 * rewritten since. A block a prefix lookup can find must be clean in every slot, and every
 * sequence reads back its own clean flags (a rewrite that skipped copy-on-write would show up
 * in the sequence sharing the block).
 */
function run(ops: Op[], numBlocks: number, blockSize: number, policy: 'lru' | 'lfu' | 'fifo') {
  const m = new KvCacheManager({
    numBlocks,
    blockSize,
    evictionPolicy: createEvictionPolicy(policy),
  });
  const memory = new Int32Array(numBlocks * blockSize).fill(-1);
  const clean = new Uint8Array(numBlocks * blockSize);
  const contents = new Map<SeqId, number[]>();
  const cleanOf = new Map<SeqId, boolean[]>();
  /** Logical index of each compressed sequence's first dropped or rewritten block. */
  const firstDrop = new Map<SeqId, number>();
  let dropped = 0;
  let nextId = 0;
  const live = () => [...contents.keys()];

  const write = (
    seq: SeqId,
    tokens: number[],
    result: ReturnType<KvCacheManager['allocateSlots']>,
  ) => {
    if (!result.ok) return false;
    copy(result.copies);
    const isClean = !firstDrop.has(seq);
    result.slotMapping.forEach((slot, i) => {
      memory[slot] = tokens[i]!;
      clean[slot] = isClean ? 1 : 0;
    });
    contents.get(seq)!.push(...tokens);
    for (const _ of tokens) cleanOf.get(seq)!.push(isClean);
    return true;
  };
  const copy = (copies: readonly { src: number; dst: number }[]) => {
    for (const c of copies) {
      memory.copyWithin(c.dst * blockSize, c.src * blockSize, (c.src + 1) * blockSize);
      clean.copyWithin(c.dst * blockSize, c.src * blockSize, (c.src + 1) * blockSize);
    }
  };
  const forget = (seq: SeqId) => {
    contents.delete(seq);
    cleanOf.delete(seq);
    firstDrop.delete(seq);
  };
  const markCompressed = (seq: SeqId, from: number) => {
    firstDrop.set(seq, Math.min(from, firstDrop.get(seq) ?? Number.POSITIVE_INFINITY));
  };

  for (const op of ops) {
    const ids = live();
    if (op.kind === 'new') {
      const seq = nextId++;
      const prefix = op.usePrefix ? m.findCachedPrefix(op.tokens) : undefined;
      const rest = prefix ? op.tokens.slice(prefix.numTokens) : op.tokens;
      const before = m.stats();
      contents.set(seq, prefix ? op.tokens.slice(0, prefix.numTokens) : []);
      cleanOf.set(seq, new Array<boolean>(prefix?.numTokens ?? 0).fill(true));
      const r = m.allocateSlots(seq, rest, prefix ? { prefix } : {});
      if (!write(seq, rest, r)) {
        forget(seq);
        expect(m.has(seq)).toBe(false);
        expect({
          ...m.stats(),
          prefixQueries: 0,
          prefixQueryTokens: 0,
          prefixHitTokens: 0,
        }).toEqual({
          ...before,
          prefixQueries: 0,
          prefixQueryTokens: 0,
          prefixHitTokens: 0,
        });
      }
    } else if (ids.length > 0) {
      const seq = ids[op.pick % ids.length]!;
      if (op.kind === 'append') {
        const table = [...m.blockTable(seq)];
        const r = m.allocateSlots(seq, op.tokens);
        if (!write(seq, op.tokens, r)) expect(m.blockTable(seq)).toEqual(table);
      } else if (op.kind === 'fork') {
        const child = nextId++;
        m.fork(seq, child);
        contents.set(child, [...contents.get(seq)!]);
        cleanOf.set(child, [...cleanOf.get(seq)!]);
        if (firstDrop.has(seq)) firstDrop.set(child, firstDrop.get(seq)!);
      } else if (op.kind === 'drop') {
        const table = [...m.blockTable(seq)];
        const drop = distinctIndices(op.blocks, table.length - 1);
        m.dropBlocks(seq, drop);
        const gone = new Set(drop);
        const keep = (_: unknown, pos: number) => !gone.has(Math.floor(pos / blockSize));
        contents.set(seq, contents.get(seq)!.filter(keep));
        cleanOf.set(seq, cleanOf.get(seq)!.filter(keep));
        expect(m.blockTable(seq)).toEqual(table.filter((_, i) => !gone.has(i)));
        if (drop.length > 0) markCompressed(seq, Math.min(...drop));
        dropped += drop.length;
      } else if (op.kind === 'rewrite') {
        const table = [...m.blockTable(seq)];
        const blocks = distinctIndices(op.blocks, table.length);
        let copies: ReturnType<KvCacheManager['prepareRewrite']>;
        try {
          copies = m.prepareRewrite(seq, blocks);
        } catch (e) {
          expect((e as { code?: string }).code).toBe('OUT_OF_BLOCKS');
          expect(m.blockTable(seq)).toEqual(table);
          checkInvariants(m, memory, clean, contents, cleanOf, blockSize);
          continue;
        }
        copy(copies);
        // The executor rewrites the blocks in place: their content no longer matches any hash.
        const after = m.blockTable(seq);
        const flags = cleanOf.get(seq)!;
        for (const i of blocks) {
          expect(m.blocks.refCount(after[i]!)).toBe(1);
          expect(m.blocks.hashOf(after[i]!)).toBeUndefined();
          clean.fill(0, after[i]! * blockSize, (after[i]! + 1) * blockSize);
          for (let pos = i * blockSize; pos < Math.min(flags.length, (i + 1) * blockSize); pos++) {
            flags[pos] = false;
          }
        }
        if (blocks.length > 0) markCompressed(seq, Math.min(...blocks));
      } else if (op.kind === 'fail') {
        // What the slots hold is garbage (-2): later prefix hits must never read them.
        const all = [...contents.get(seq)!, ...op.tokens];
        const r = m.allocateSlots(seq, op.tokens);
        if (r.ok) for (const slot of r.slotMapping) memory[slot] = -2;
        m.free(seq, { keepCached: false });
        forget(seq);
        const hit = m.findCachedPrefix(all);
        for (let pos = 0; pos < hit.numTokens; pos++) {
          const block = hit.blocks[Math.floor(pos / blockSize)]!;
          expect(memory[block * blockSize + (pos % blockSize)]).toBe(all[pos]);
        }
      } else {
        const table = [...m.blockTable(seq)];
        const from = firstDrop.get(seq) ?? table.length;
        const exclusive = table.map((b) => m.blocks.refCount(b) === 1);
        m.free(seq);
        forget(seq);
        // A compressed sequence keeps cached only the blocks before its first drop.
        for (let i = from; i < table.length; i++) {
          if (exclusive[i]) expect(m.blocks.hashOf(table[i]!)).toBeUndefined();
        }
      }
    }
    checkInvariants(m, memory, clean, contents, cleanOf, blockSize);
    expect(m.stats().droppedBlocks).toBe(dropped);
    expect(m.stats().compressedSequences).toBe(firstDrop.size);
  }
  for (const seq of live()) {
    m.free(seq);
    forget(seq);
  }
  const s = m.stats();
  expect(s.usedBlocks).toBe(0);
  expect(s.freeBlocks + s.cachedBlocks).toBe(numBlocks);
  checkInvariants(m, memory, clean, contents, cleanOf, blockSize);
}

function checkInvariants(
  m: KvCacheManager,
  memory: Int32Array,
  clean: Uint8Array,
  contents: Map<SeqId, number[]>,
  cleanOf: Map<SeqId, boolean[]>,
  blockSize: number,
) {
  const refs = new Int32Array(m.numBlocks);
  for (const [seq, tokens] of contents) {
    const table = m.blockTable(seq);
    expect(new Set(table).size).toBe(table.length);
    expect(m.numTokens(seq)).toBe(tokens.length);
    expect(table.length).toBe(Math.ceil(tokens.length / blockSize));
    for (const b of table) refs[b]!++;
    // The sequence reads back exactly its tokens through its block table.
    const flags = cleanOf.get(seq)!;
    tokens.forEach((t, pos) => {
      const slot = table[Math.floor(pos / blockSize)]! * blockSize + (pos % blockSize);
      expect(memory[slot]).toBe(t);
      expect(clean[slot]).toBe(flags[pos] ? 1 : 0);
    });
  }
  let used = 0;
  let cached = 0;
  let free = 0;
  for (let b = 0; b < m.numBlocks; b++) {
    expect(m.blocks.refCount(b)).toBe(refs[b]);
    // Whatever a prefix lookup can find holds the KV its hash names.
    if (m.blocks.hashOf(b) !== undefined) {
      expect(Array.from(clean.subarray(b * blockSize, (b + 1) * blockSize))).not.toContain(0);
    }
    if (refs[b]! > 0) used++;
    else if (m.blocks.hashOf(b) !== undefined) cached++;
    else free++;
  }
  const s = m.stats();
  expect([s.usedBlocks, s.cachedBlocks, s.freeBlocks]).toEqual([used, cached, free]);
  expect(used + cached + free).toBe(m.numBlocks);
}

describe('KvCacheManager invariants under random workloads', () => {
  for (const policy of ['lru', 'lfu', 'fifo'] as const) {
    it(`holds with ${policy} eviction on tiny pools`, () => {
      fc.assert(
        fc.property(
          fc.array(opArb, { maxLength: 60 }),
          fc.integer({ min: 1, max: 12 }),
          fc.constantFrom(1, 2, 4),
          (ops, numBlocks, blockSize) => run(ops, numBlocks, blockSize, policy),
        ),
        { numRuns: 250 },
      );
    });
  }
});
