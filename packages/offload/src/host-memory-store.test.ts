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

async function codeOf(p: Promise<unknown>): Promise<string | undefined> {
  try {
    await p;
  } catch (e) {
    return OffloadError.isInstance(e) ? e.code : `not an OffloadError: ${String(e)}`;
  }
  return undefined;
}

describe('HostMemoryStore', () => {
  it('round-trips blocks, copying in and out', async () => {
    const s = new HostMemoryStore({ namespace: NS, maxBytes: 1 << 20 });
    const v = block(1, 4096);
    expect(await s.putMany([{ key: key(1), value: v }])).toBe(1);
    v[0] = (v[0] ?? 0) ^ 0xff; // the caller reuses its buffer
    const [got] = await s.getMany([key(1)]);
    expect(sameBytes(got, block(1, 4096))).toBe(true);
    got?.fill(0); // the caller scribbles on what it got
    expect(sameBytes((await s.getMany([key(1)]))[0], block(1, 4096))).toBe(true);
    expect(await s.getMany([key(2)])).toEqual([undefined]);
    expect(await s.has(key(1))).toBe(true);
    expect(s.stats()).toMatchObject({ hits: 2, misses: 1, entries: 1, bytes: 4096, puts: 1 });
  });

  it('hands out views of the stored bytes with copyOnGet: false', async () => {
    const s = new HostMemoryStore({ namespace: NS, maxBytes: 1 << 20, copyOnGet: false });
    await s.putMany([{ key: key(1), value: block(1, 64) }]);
    const [a] = await s.getMany([key(1)]);
    const [b] = await s.getMany([key(1)]);
    expect(a).toBe(b);
    expect(sameBytes(a, block(1, 64))).toBe(true);
  });

  it('counts a present prefix and stops at the first gap', async () => {
    const s = new HostMemoryStore({ namespace: NS, maxBytes: 1 << 20 });
    await s.putMany([0, 1, 2, 4].map((i) => ({ key: key(i), value: block(i, 16) })));
    expect(await s.countPrefix([0, 1, 2, 3, 4].map(key))).toBe(3);
    expect(await s.countPrefix([key(3), key(0)])).toBe(0);
    expect(await s.countPrefix([])).toBe(0);
    expect(await s.delete([key(1), key(3)])).toBe(1);
    expect(await s.countPrefix([0, 1, 2].map(key))).toBe(1);
  });

  it('refuses misuse before changing anything', async () => {
    const s = new HostMemoryStore({ namespace: NS, maxBytes: 1000 });
    expect(await codeOf(s.putMany([{ key: 'nope', value: block(1, 8) }]))).toBe('INVALID_KEY');
    expect(
      await codeOf(
        s.putMany([
          { key: key(1), value: block(1, 8) },
          { key: key(2), value: new Uint8Array(0) },
        ]),
      ),
    ).toBe('INVALID_VALUE');
    expect(await codeOf(s.putMany([{ key: key(3), value: block(3, 1001) }]))).toBe(
      'VALUE_TOO_LARGE',
    );
    expect(s.stats().entries).toBe(0);
    expect(await codeOf(s.getMany(['ABC']))).toBe('INVALID_KEY');
    expect(() => new HostMemoryStore({ namespace: 'x', maxBytes: 1 })).toThrow(OffloadError);
    expect(() => new HostMemoryStore({ namespace: NS, maxBytes: 0 })).toThrow(OffloadError);
    await s.close();
    expect(await codeOf(s.getMany([key(1)]))).toBe('CLOSED');
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
