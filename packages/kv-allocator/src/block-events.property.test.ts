import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { BlockPoolEvent } from './block-pool.js';
import { hashBlock, rootHash } from './hash.js';
import { KvCacheManager } from './kv-cache-manager.js';
import type { BlockHash, SeqId } from './types.js';

type Op =
  | { kind: 'new'; tokens: number[]; usePrefix: boolean }
  | { kind: 'append'; pick: number; tokens: number[] }
  | { kind: 'free'; pick: number; keepCached: boolean }
  | { kind: 'external'; tokens: number[]; commit: boolean }
  | { kind: 'reset' };

const tokenArb = fc.integer({ min: 0, max: 2 });
const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant('new' as const),
      tokens: fc.array(tokenArb, { minLength: 1, maxLength: 24 }),
      usePrefix: fc.boolean(),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant('append' as const),
      pick: fc.nat(),
      tokens: fc.array(tokenArb, { minLength: 1, maxLength: 8 }),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant('free' as const),
      pick: fc.nat(),
      keepCached: fc.boolean(),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('external' as const),
      tokens: fc.array(tokenArb, { minLength: 4, maxLength: 24 }),
      commit: fc.boolean(),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('reset' as const) }) },
);

describe('KvCacheManager block events', () => {
  it('an index rebuilt from the events equals the pool hash index after random ops with evictions', () => {
    fc.assert(
      fc.property(
        fc.array(opArb, { minLength: 1, maxLength: 80 }),
        fc.integer({ min: 4, max: 12 }),
        (ops, numBlocks) => {
          const blockSize = 4;
          const events: BlockPoolEvent[] = [];
          const m = new KvCacheManager({
            numBlocks,
            blockSize,
            onBlockEvent: (e) => events.push(e),
          });
          const index = new Map<BlockHash, number>();
          const root = rootHash('kvasir');
          const seqs: SeqId[] = [];
          let next = 0;
          const apply = (): void => {
            for (const e of events.splice(0)) {
              if (e.type === 'stored') {
                expect(index.has(e.hash)).toBe(false);
                index.set(e.hash, e.block);
                // A consumer can re-derive the hash from the parent and the tokens.
                if (e.tokens !== undefined) {
                  expect(e.tokens).toHaveLength(blockSize);
                  expect(hashBlock(e.parent ?? root, e.tokens, 0, blockSize)).toBe(e.hash);
                }
              } else {
                expect(index.get(e.hash)).toBe(e.block);
                index.delete(e.hash);
              }
            }
          };
          for (const op of ops) {
            if (op.kind === 'new') {
              const id = next++;
              const prefix = op.usePrefix ? m.findCachedPrefix(op.tokens) : undefined;
              const rest = op.tokens.slice(prefix?.numTokens ?? 0);
              if (m.allocateSlots(id, rest, prefix ? { prefix } : {}).ok) seqs.push(id);
            } else if (op.kind === 'append' && seqs.length > 0) {
              const id = seqs[op.pick % seqs.length]!;
              m.allocateSlots(id, op.tokens);
            } else if (op.kind === 'free' && seqs.length > 0) {
              const [id] = seqs.splice(op.pick % seqs.length, 1);
              m.free(id!, { keepCached: op.keepCached });
            } else if (op.kind === 'external') {
              const r = m.reserveExternal(op.tokens, { maxBlocks: 3 });
              if (r !== undefined) {
                if (op.commit) m.commitExternal(r);
                else m.abortExternal(r);
              }
            } else if (op.kind === 'reset') {
              m.resetPrefixCache();
            }
            apply();
            expect(new Map(m.publishedBlocks().map(([b, h]) => [h, b]))).toEqual(index);
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});
