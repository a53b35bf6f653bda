import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { KvEvent } from './kv-event-decoder.js';
import { PrefixIndex } from './prefix-index.js';

const HASHES = Array.from({ length: 12 }, (_, i) => i.toString(16).padStart(32, '0'));
const MEDIA = ['GPU', 'CPU', 'DISK', 'REDIS'];
const REPLICAS = ['a', 'b', 'c'];

const eventArb: fc.Arbitrary<[string, KvEvent]> = fc.tuple(
  fc.constantFrom(...REPLICAS),
  fc.oneof(
    {
      weight: 6,
      arbitrary: fc.record({
        type: fc.constant('BlockStored' as const),
        blockHashes: fc.subarray(HASHES, { minLength: 1 }),
        parentBlockHash: fc.constant(null),
        tokenIds: fc.constant([]),
        blockSize: fc.constant(16),
        medium: fc.constantFrom(...MEDIA),
      }),
    },
    {
      weight: 4,
      arbitrary: fc.record({
        type: fc.constant('BlockRemoved' as const),
        blockHashes: fc.subarray(HASHES, { minLength: 1 }),
        medium: fc.constantFrom(...MEDIA),
      }),
    },
    { weight: 1, arbitrary: fc.constant({ type: 'AllBlocksCleared' as const }) },
  ),
);

describe('PrefixIndex', () => {
  it('equals a plain model of (replica, medium) → blocks after any events; a prefix match stops at the first hole', () => {
    fc.assert(
      fc.property(fc.array(eventArb, { maxLength: 80 }), fc.subarray(HASHES), (events, prompt) => {
        const index = new PrefixIndex({ sharedMedia: ['REDIS'] });
        const model = new Map<string, Set<string>>(); // `${replica}/${medium}` → hashes
        const key = (r: string, m: string) => `${r}/${m}`;
        for (const [replica, e] of events) {
          index.apply(replica, e);
          if (e.type === 'AllBlocksCleared') {
            for (const m of MEDIA) model.delete(key(replica, m));
            continue;
          }
          const set = model.get(key(replica, e.medium)) ?? new Set();
          for (const h of e.blockHashes) {
            if (e.type === 'BlockStored') set.add(h);
            else set.delete(h);
          }
          model.set(key(replica, e.medium), set);
        }
        const weight: Record<string, number> = { GPU: 1, CPU: 0.8, DISK: 0.6, REDIS: 0.5 };
        for (const r of REPLICAS) {
          const all = new Set<string>();
          for (const m of MEDIA) {
            const want = [...(model.get(key(r, m)) ?? [])].sort();
            expect([...index.blocks(r, m)].sort()).toEqual(want);
            for (const h of want) all.add(h);
          }
          expect([...index.blocks(r)].sort()).toEqual([...all].sort());
          expect(index.size(r)).toBe(all.size);
          // A block in REDIS, stored by any replica, counts for every replica.
          let n = 0;
          let weighted = 0;
          for (const h of prompt) {
            let w = 0;
            for (const m of MEDIA) if (model.get(key(r, m))?.has(h)) w = Math.max(w, weight[m]!);
            if (REPLICAS.some((o) => model.get(key(o, 'REDIS'))?.has(h))) w = Math.max(w, 0.5);
            if (w === 0) break;
            n++;
            weighted += w;
          }
          const m = index.match(r, prompt);
          expect(m.blocks).toBe(n);
          expect(m.weighted).toBeCloseTo(weighted, 9);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('counts predicted blocks until an event names them or they expire', () => {
    const index = new PrefixIndex();
    const [h0, h1, h2] = HASHES as [string, string, string];
    index.predict('a', [h0, h1], 1000, 0);
    expect(index.match('a', [h0, h1, h2], 500)).toEqual({ blocks: 2, weighted: 2, predicted: 2 });
    expect(index.blocks('a').size).toBe(0); // predictions are not what events said
    expect(index.match('a', [h0, h1], 1000)).toEqual({ blocks: 0, weighted: 0, predicted: 0 });
    index.predict('a', [h0, h1], 1000, 0);
    index.apply('a', { type: 'BlockRemoved', blockHashes: [h1], medium: 'GPU' });
    expect(index.match('a', [h0, h1], 500).blocks).toBe(1);
    index.apply('a', {
      type: 'BlockStored',
      blockHashes: [h0],
      parentBlockHash: null,
      tokenIds: [],
      blockSize: 16,
      medium: 'CPU',
    });
    expect(index.match('a', [h0], 500)).toEqual({ blocks: 1, weighted: 0.8, predicted: 0 });
  });
});
