import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { KvCacheManager } from './kv-cache-manager.js';
import { HOLE } from './kv-groups.js';
import type { SeqId } from './types.js';

type Op =
  | { kind: 'new'; tokens: number[]; usePrefix: boolean; cap: number }
  | { kind: 'append'; pick: number; tokens: number[] }
  | { kind: 'fork'; pick: number }
  | { kind: 'free'; pick: number }
  | { kind: 'fail'; pick: number; tokens: number[] }
  | { kind: 'preempt'; pick: number };

const tokenArb = fc.integer({ min: 0, max: 2 });
const opArb: fc.Arbitrary<Op> = fc.oneof(
  fc.record({
    kind: fc.constant('new' as const),
    tokens: fc.array(tokenArb, { minLength: 1, maxLength: 40 }),
    usePrefix: fc.boolean(),
    cap: fc.nat({ max: 12 }),
  }),
  fc.record({
    kind: fc.constant('append' as const),
    pick: fc.nat(),
    tokens: fc.array(tokenArb, { minLength: 1, maxLength: 5 }),
  }),
  fc.record({
    kind: fc.constant('append' as const),
    pick: fc.nat(),
    tokens: fc.array(tokenArb, { minLength: 1, maxLength: 1 }),
  }),
  fc.record({ kind: fc.constant('fork' as const), pick: fc.nat() }),
  fc.record({ kind: fc.constant('free' as const), pick: fc.nat() }),
  fc.record({
    kind: fc.constant('fail' as const),
    pick: fc.nat(),
    tokens: fc.array(tokenArb, { minLength: 1, maxLength: 8 }),
  }),
  fc.record({ kind: fc.constant('preempt' as const), pick: fc.nat() }),
);

/** What a slot of the fake device holds: which group's layers wrote which token at which position. */
interface Cell {
  readonly group: number;
  readonly token: number;
  readonly pos: number;
}

/**
 * Random allocations, decodes, forks, frees, failed steps and preemptions (free, then recompute
 * from a prefix hit) against a manager with full and sliding groups, over a fake device that
 * records what was written into each slot. After every op: each table entry is a block whose
 * reference count equals the references all tables hold (so no released block is referenced
 * and none leaks), holes sit only before the next query's window, every key a next query of
 * each group reads is its own token at its own position written by that group's layers, and a
 * sliding group holds no more blocks than its window needs. At the end every block is free or
 * cached.
 */
function run(ops: Op[], numBlocks: number, blockSize: number, windows: (number | null)[]) {
  const m = new KvCacheManager({
    numBlocks,
    blockSize,
    groups: windows.map((window) => ({ window })),
  });
  const memory: (Cell | undefined)[] = new Array(numBlocks * blockSize);
  const contents = new Map<SeqId, number[]>();
  let nextId = 0;
  const live = () => [...contents.keys()];
  const write = (seq: SeqId, tokens: number[], r: ReturnType<KvCacheManager['allocateSlots']>) => {
    if (!r.ok) return false;
    for (const c of r.copies) {
      for (let o = 0; o < blockSize; o++)
        memory[c.dst * blockSize + o] = memory[c.src * blockSize + o];
    }
    const start = contents.get(seq)!.length;
    expect(r.slotMappings).toHaveLength(windows.length);
    expect(r.slotMappings[0]).toBe(r.slotMapping);
    r.slotMappings.forEach((slots, group) => {
      slots.forEach((slot, i) => {
        memory[slot] = { group, token: tokens[i]!, pos: start + i };
      });
    });
    contents.get(seq)!.push(...tokens);
    return true;
  };
  const admit = (seq: SeqId, tokens: number[], usePrefix: boolean, cap: number) => {
    const prefix = usePrefix
      ? m.findCachedPrefix(tokens, undefined, {
          maxBlocks: Math.min(cap, Math.floor((tokens.length - 1) / blockSize)),
        })
      : undefined;
    const hit = prefix?.numTokens ?? 0;
    contents.set(seq, tokens.slice(0, hit));
    const rest = tokens.slice(hit);
    const before = m.stats().usedBlocks;
    if (!write(seq, rest, m.allocateSlots(seq, rest, prefix ? { prefix } : {}))) {
      contents.delete(seq);
      expect(m.has(seq)).toBe(false);
      expect(m.stats().usedBlocks).toBe(before);
    }
  };

  const check = (lastAppend?: { seq: SeqId; k: number }) => {
    const refs = new Map<number, number>();
    for (const seq of live()) {
      const toks = contents.get(seq)!;
      const n = toks.length;
      expect(m.numTokens(seq)).toBe(n);
      const tables = m.blockTables(seq);
      expect(tables).toHaveLength(windows.length);
      tables.forEach((table, g) => {
        const w = windows[g]!;
        expect(table).toHaveLength(Math.ceil(n / blockSize));
        // Holes only before the window of the query at position n.
        const lo = w === null ? 0 : Math.max(0, Math.floor((n + 1 - w) / blockSize));
        table.forEach((b, i) => {
          if (b === HOLE) {
            expect(i).toBeLessThan(lo);
            return;
          }
          expect(b).toBeGreaterThanOrEqual(0);
          refs.set(b, (refs.get(b) ?? 0) + 1);
        });
        // Every key the next query reads: this group's layers wrote this token at this position.
        const first = w === null ? 0 : Math.max(0, n + 1 - w);
        for (let p = first; p < n; p++) {
          const b = table[Math.floor(p / blockSize)]!;
          expect(b).not.toBe(HOLE);
          expect(memory[b * blockSize + (p % blockSize)]).toEqual({
            group: g,
            token: toks[p],
            pos: p,
          });
        }
        if (w !== null && lastAppend?.seq === seq) {
          const held = table.filter((b) => b !== HOLE).length;
          expect(held).toBeLessThanOrEqual(Math.ceil((lastAppend.k + w - 1) / blockSize) + 1);
        }
      });
    }
    for (let b = 0; b < numBlocks; b++) expect(m.blocks.refCount(b)).toBe(refs.get(b) ?? 0);
    const s = m.stats();
    expect(s.usedBlocks).toBe(refs.size);
    expect(s.usedBlocks + s.cachedBlocks + s.freeBlocks).toBe(numBlocks);
    expect(s.groups.map((g) => g.window)).toEqual(windows);
  };

  for (const op of ops) {
    const ids = live();
    let lastAppend: { seq: SeqId; k: number } | undefined;
    if (op.kind === 'new') {
      admit(nextId++, op.tokens, op.usePrefix, op.cap);
    } else if (ids.length > 0) {
      const seq = ids[op.pick % ids.length]!;
      if (op.kind === 'append') {
        if (write(seq, op.tokens, m.allocateSlots(seq, op.tokens)))
          lastAppend = { seq, k: op.tokens.length };
      } else if (op.kind === 'fork') {
        const child = nextId++;
        m.fork(seq, child);
        contents.set(child, [...contents.get(seq)!]);
      } else if (op.kind === 'free') {
        m.free(seq);
        contents.delete(seq);
      } else if (op.kind === 'fail') {
        // The step's slots were allocated, then the forward pass failed: nothing was written.
        const r = m.allocateSlots(seq, op.tokens);
        if (r.ok) {
          for (const slots of r.slotMappings) for (const slot of slots) memory[slot] = undefined;
          m.free(seq, { keepCached: false });
          contents.delete(seq);
        }
      } else {
        // Preemption by recomputation: free, then come back through the prefix cache.
        const toks = contents.get(seq)!;
        m.free(seq);
        contents.delete(seq);
        admit(nextId++, toks, true, 1 << 20);
      }
    }
    check(lastAppend);
  }
  for (const seq of live()) m.free(seq);
  const s = m.stats();
  expect(s.usedBlocks).toBe(0);
  expect(s.cachedBlocks + s.freeBlocks).toBe(numBlocks);
}

describe('KvCacheManager with sliding-window groups (property)', () => {
  const cases: [string, (number | null)[]][] = [
    ['one full and two sliding groups', [null, 6, 6]],
    ['sliding groups only, windows 1 and 9', [1, 9]],
    ['a sliding group first', [5, null]],
  ];
  for (const [name, windows] of cases) {
    it(`holds for ${name}`, () => {
      fc.assert(
        fc.property(
          fc.array(opArb, { minLength: 1, maxLength: 60 }),
          fc.integer({ min: 4, max: 48 }),
          fc.integer({ min: 1, max: 4 }),
          (ops, numBlocks, blockSize) => run(ops, numBlocks, blockSize, windows),
        ),
        { numRuns: 150 },
      );
    });
  }
});
