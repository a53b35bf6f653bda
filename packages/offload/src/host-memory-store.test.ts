import {
  type BlockHash,
  defineEvictionPolicy,
  type EvictionPolicy,
  FifoPolicy,
  LfuPolicy,
} from '@kvasir/kv-allocator';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { OffloadError } from './errors.js';
import { HostMemoryStore } from './host-memory-store.js';
import { block, key, NS, sameBytes } from './testing/fixtures.js';

describe('HostMemoryStore', () => {
  it('hands out views of the stored bytes with copyOnGet: false', async () => {
    const s = new HostMemoryStore({ namespace: NS, maxBytes: 1 << 20, copyOnGet: false });
    await s.putMany([{ key: key(1), value: block(1, 64) }]);
    const [a] = await s.getMany([key(1)]);
    const [b] = await s.getMany([key(1)]);
    expect(a).toBe(b);
    expect(sameBytes(a, block(1, 64))).toBe(true);
  });

  // The KvBlockStore contract (round trips, copies, prefixes, misuse, closing) is checked by
  // conformance/stores.conformance.test.ts; what follows is this store's own.
  it('refuses a malformed namespace or budget', () => {
    expect(() => new HostMemoryStore({ namespace: 'x', maxBytes: 1 })).toThrow(OffloadError);
    expect(() => new HostMemoryStore({ namespace: NS, maxBytes: 0 })).toThrow(OffloadError);
  });

  it('evicts least recently used first by default and never exceeds the budget (property)', () => {
    // Model: an array ordered from least to most recently used.
    fc.assert(
      fc.property(
        fc.array(
          fc.oneof(
            fc.record({
              op: fc.constant('put' as const),
              k: fc.integer({ min: 0, max: 12 }),
              size: fc.integer({ min: 1, max: 400 }),
            }),
            fc.record({ op: fc.constant('get' as const), k: fc.integer({ min: 0, max: 12 }) }),
            fc.record({ op: fc.constant('del' as const), k: fc.integer({ min: 0, max: 12 }) }),
          ),
          { maxLength: 80 },
        ),
        (ops) => {
          const maxBytes = 1000;
          const s = new HostMemoryStore({ namespace: NS, maxBytes });
          let model: { k: number; size: number }[] = [];
          for (const o of ops) {
            if (o.op === 'put') {
              s.putManySync([{ key: key(o.k), value: block(o.k, o.size) }]);
              model = model.filter((e) => e.k !== o.k);
              let used = model.reduce((a, e) => a + e.size, 0);
              while (used + o.size > maxBytes) {
                used -= model[0]?.size ?? 0;
                model.shift();
              }
              model.push({ k: o.k, size: o.size });
            } else if (o.op === 'get') {
              const [v] = s.getManySync([key(o.k)]);
              const at = model.findIndex((e) => e.k === o.k);
              if ((v !== undefined) !== at >= 0) return false;
              if (at >= 0) model.push(...model.splice(at, 1));
            } else {
              void s.delete([key(o.k)]);
              model = model.filter((e) => e.k !== o.k);
            }
            const st = s.stats();
            if ((st.bytes ?? 0) > maxBytes) return false;
            const expected = model.map((e) => key(e.k)).sort();
            if (JSON.stringify(s.keys().sort()) !== JSON.stringify(expected)) return false;
          }
          return true;
        },
      ),
      { numRuns: 200 },
    );
  });

  it('evicts exactly the victims a plugged-in policy chooses (LFU, FIFO, custom)', () => {
    const makers: (() => EvictionPolicy<BlockHash>)[] = [
      () => new LfuPolicy<BlockHash>(),
      () => new FifoPolicy<BlockHash>(),
      () => {
        // A plain-object policy: evict the lexicographically largest key.
        const keys = new Set<BlockHash>();
        return defineEvictionPolicy<BlockHash>({
          name: 'largest-key',
          insert: (k) => void keys.add(k),
          touch: () => undefined,
          remove: (k) => void keys.delete(k),
          chooseVictim: () => [...keys].sort().at(-1),
        });
      },
    ];
    for (const make of makers) {
      fc.assert(
        fc.property(
          fc.array(fc.tuple(fc.boolean(), fc.integer({ min: 0, max: 9 })), { maxLength: 60 }),
          (ops) => {
            const inner = make();
            let lastChoice: BlockHash | undefined;
            const spy = defineEvictionPolicy<BlockHash>({
              name: 'spy',
              insert: (k) => inner.insert(k),
              touch: (k) => inner.touch(k),
              remove: (k) => inner.remove(k),
              chooseVictim: () => {
                lastChoice = inner.chooseVictim();
                return lastChoice;
              },
            });
            const s = new HostMemoryStore({ namespace: NS, maxBytes: 4 * 100, policy: spy });
            let ok = true;
            s.onEvict((k, v) => {
              if (k !== lastChoice || v.byteLength !== 100) ok = false;
            });
            for (const [isPut, k] of ops) {
              if (isPut) s.putManySync([{ key: key(k), value: block(k, 100) }]);
              else s.getManySync([key(k)]);
              if ((s.stats().bytes ?? 0) > 400 || (s.stats().entries ?? 0) > 4) ok = false;
            }
            return ok;
          },
        ),
        { numRuns: 100 },
      );
    }
  });

  it('stays within budget even when a user policy forgets keys', () => {
    const s = new HostMemoryStore({
      namespace: NS,
      maxBytes: 300,
      policy: defineEvictionPolicy<BlockHash>({
        name: 'forgetful',
        insert() {},
        touch() {},
        remove() {},
        chooseVictim: () => undefined,
      }),
    });
    for (let i = 0; i < 10; i++) s.putManySync([{ key: key(i), value: block(i, 100) }]);
    expect(s.stats().bytes).toBe(300);
    expect(s.keys()).toEqual([7, 8, 9].map(key));
  });
});
