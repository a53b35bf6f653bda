import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { KvCacheManager } from './kv-cache-manager';
import { createEvictionPolicy } from './policies/registry';
import type { SeqId } from './types';

type Op =
  | { kind: 'new'; tokens: number[]; usePrefix: boolean }
  | { kind: 'append'; pick: number; tokens: number[] }
  | { kind: 'fork'; pick: number }
  | { kind: 'free'; pick: number }
  | { kind: 'fail'; pick: number; tokens: number[] };

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
);

/**
 * Runs random operations against a manager while a fake device memory records which token was
 * written into which slot (and applies the returned copy-on-write copies). After every step it
 * checks the structural invariants and that every sequence reads back exactly its own tokens.
 */
function run(ops: Op[], numBlocks: number, blockSize: number, policy: 'lru' | 'lfu' | 'fifo') {
  const m = new KvCacheManager({
    numBlocks,
    blockSize,
    evictionPolicy: createEvictionPolicy(policy),
  });
  const memory = new Int32Array(numBlocks * blockSize).fill(-1);
  const contents = new Map<SeqId, number[]>();
  let nextId = 0;
  const live = () => [...contents.keys()];

  const write = (
    seq: SeqId,
    tokens: number[],
    result: ReturnType<KvCacheManager['allocateSlots']>,
  ) => {
    if (!result.ok) return false;
    for (const c of result.copies) {
      memory.copyWithin(c.dst * blockSize, c.src * blockSize, (c.src + 1) * blockSize);
    }
    result.slotMapping.forEach((slot, i) => {
      memory[slot] = tokens[i]!;
    });
    contents.get(seq)!.push(...tokens);
    return true;
  };

  for (const op of ops) {
    const ids = live();
    if (op.kind === 'new') {
      const seq = nextId++;
      const prefix = op.usePrefix ? m.findCachedPrefix(op.tokens) : undefined;
      const rest = prefix ? op.tokens.slice(prefix.numTokens) : op.tokens;
      const before = m.stats();
      contents.set(seq, prefix ? op.tokens.slice(0, prefix.numTokens) : []);
      const r = m.allocateSlots(seq, rest, prefix ? { prefix } : {});
      if (!write(seq, rest, r)) {
        contents.delete(seq);
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
      } else if (op.kind === 'fail') {
        // What the slots hold is garbage (-2): later prefix hits must never read them.
        const all = [...contents.get(seq)!, ...op.tokens];
        const r = m.allocateSlots(seq, op.tokens);
        if (r.ok) for (const slot of r.slotMapping) memory[slot] = -2;
        m.free(seq, { keepCached: false });
        contents.delete(seq);
        const hit = m.findCachedPrefix(all);
        for (let pos = 0; pos < hit.numTokens; pos++) {
          const block = hit.blocks[Math.floor(pos / blockSize)]!;
          expect(memory[block * blockSize + (pos % blockSize)]).toBe(all[pos]);
        }
      } else {
        m.free(seq);
        contents.delete(seq);
      }
    }
    checkInvariants(m, memory, contents, blockSize);
  }
  for (const seq of live()) m.free(seq);
  const s = m.stats();
  expect(s.usedBlocks).toBe(0);
  expect(s.freeBlocks + s.cachedBlocks).toBe(numBlocks);
}

function checkInvariants(
  m: KvCacheManager,
  memory: Int32Array,
  contents: Map<SeqId, number[]>,
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
    tokens.forEach((t, pos) => {
      expect(memory[table[Math.floor(pos / blockSize)]! * blockSize + (pos % blockSize)]).toBe(t);
    });
  }
  let used = 0;
  let cached = 0;
  let free = 0;
  for (let b = 0; b < m.numBlocks; b++) {
    expect(m.blocks.refCount(b)).toBe(refs[b]);
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
