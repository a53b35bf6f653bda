import { strict as assert } from 'node:assert';
import type { BlockHash } from '@kvasir/kv-allocator';
import { kvNamespace } from '../keys.js';
import type { KvBlockStore } from '../types.js';
import { type ConformanceCheck, codeOf, sameBytes, seeded, testBytes, testKey } from './check.js';

/** What {@link kvBlockStoreChecks} tests. */
export interface KvBlockStoreConformanceOptions {
  /** Name of the store under test (the describe block's). */
  readonly name: string;
  /**
   * Opens a fresh, empty store in `namespace`, able to hold 64 KiB of blocks without evicting
   * and values of at least 4 KiB. Each check opens its own and closes it.
   */
  readonly open: (namespace: string) => Promise<KvBlockStore>;
  /** Random operation sequences the model-based check runs (default 20, of 60 operations). */
  readonly sequences?: number;
}

/** The namespace the suite opens stores in. */
export const CONFORMANCE_NAMESPACE = kvNamespace({
  modelId: 'conformance',
  weightDigest: 'sha256:0',
  kvDtype: 'f16',
  blockSize: 16,
  numLayers: 2,
  numKvHeads: 2,
  headDim: 8,
});

const k = testKey;

async function withStore(
  options: KvBlockStoreConformanceOptions,
  body: (store: KvBlockStore) => Promise<void>,
): Promise<void> {
  const store = await options.open(CONFORMANCE_NAMESPACE);
  try {
    await body(store);
  } finally {
    await store.close();
  }
}

/**
 * The `KvBlockStore` contract as checks: what every store (host, disk, Redis, tiered, a third
 * party's) must do, whatever its backend. Run them with {@link runKvBlockStoreConformance}.
 */
export function kvBlockStoreChecks(options: KvBlockStoreConformanceOptions): ConformanceCheck[] {
  const check = (name: string, body: (store: KvBlockStore) => Promise<void>) => ({
    name,
    run: () => withStore(options, body),
  });
  return [
    check('names its tier and namespace', async (s) => {
      assert.equal(typeof s.tier, 'string');
      assert.ok(s.tier.length > 0, 'tier is empty');
      assert.equal(s.namespace, CONFORMANCE_NAMESPACE);
      assert.ok(s.maxValueBytes >= 4096, `maxValueBytes ${s.maxValueBytes} < 4096`);
      assert.equal(s.stats().tier, s.tier);
    }),
    check('round-trips blocks; a miss is undefined in its place', async (s) => {
      const entries = [0, 1, 2].map((i) => ({ key: k(i), value: testBytes(i, 1000 + i) }));
      assert.equal(await s.putMany(entries), 3);
      const got = await s.getMany([k(2), k(9), k(0), k(1)]);
      assert.equal(got.length, 4);
      assert.ok(sameBytes(got[0], entries[2]!.value), 'block 2 differs');
      assert.equal(got[1], undefined);
      assert.ok(sameBytes(got[2], entries[0]!.value), 'block 0 differs');
      assert.ok(sameBytes(got[3], entries[1]!.value), 'block 1 differs');
    }),
    check("keeps its own copy: the caller's buffers are the caller's", async (s) => {
      const value = testBytes(5, 2048);
      await s.putMany([{ key: k(5), value }]);
      value.fill(0); // the caller reuses its buffer
      const [first] = await s.getMany([k(5)]);
      assert.ok(sameBytes(first, testBytes(5, 2048)), 'a write into the put buffer showed');
      first!.fill(1); // the caller scribbles on what it got
      const [again] = await s.getMany([k(5)]);
      assert.ok(sameBytes(again, testBytes(5, 2048)), 'a write into a got buffer showed');
    }),
    check('overwrites a key with its latest value', async (s) => {
      await s.putMany([{ key: k(1), value: testBytes(1, 512) }]);
      await s.putMany([{ key: k(1), value: testBytes(2, 700) }]);
      assert.ok(sameBytes((await s.getMany([k(1)]))[0], testBytes(2, 700)));
    }),
    check('counts a present prefix, stopping at the first gap; has; delete', async (s) => {
      await s.putMany([0, 1, 2, 4].map((i) => ({ key: k(i), value: testBytes(i, 64) })));
      assert.equal(await s.countPrefix([0, 1, 2, 3, 4].map(k)), 3);
      assert.equal(await s.countPrefix([k(3), k(0)]), 0);
      assert.equal(await s.countPrefix([]), 0);
      assert.equal(await s.has(k(4)), true);
      assert.equal(await s.has(k(3)), false);
      assert.equal(await s.delete([k(1), k(3)]), 1);
      assert.equal(await s.countPrefix([0, 1, 2].map(k)), 1);
      assert.deepEqual(await s.getMany([k(1)]), [undefined]);
      assert.equal(await s.delete([k(1)]), 0);
    }),
    check('counts hits, misses, puts and deletes in stats()', async (s) => {
      const before = s.stats();
      await s.putMany([{ key: k(1), value: testBytes(1, 128) }]);
      await s.getMany([k(1), k(2)]);
      await s.delete([k(1)]);
      const after = s.stats();
      assert.equal(after.puts - before.puts, 1, 'puts');
      assert.equal(after.hits - before.hits, 1, 'hits');
      assert.equal(after.misses - before.misses, 1, 'misses');
      assert.equal(after.deletes - before.deletes, 1, 'deletes');
    }),
    check('refuses misuse with a typed error before changing anything', async (s) => {
      assert.equal(
        await codeOf(s.putMany([{ key: 'nope', value: testBytes(1, 8) }])),
        'INVALID_KEY',
      );
      const mixed = [
        { key: k(1), value: testBytes(1, 8) },
        { key: k(2), value: new Uint8Array(0) },
      ];
      assert.equal(await codeOf(s.putMany(mixed)), 'INVALID_VALUE');
      if (s.maxValueBytes <= 16 * 2 ** 20) {
        const big = [{ key: k(3), value: new Uint8Array(s.maxValueBytes + 1) }];
        assert.equal(await codeOf(s.putMany(big)), 'VALUE_TOO_LARGE');
      }
      assert.equal(await codeOf(s.getMany(['../../etc/passwd'])), 'INVALID_KEY');
      assert.equal(await codeOf(s.has('ABC')), 'INVALID_KEY');
      assert.equal(await codeOf(s.countPrefix(['*'])), 'INVALID_KEY');
      assert.equal(await codeOf(s.delete(['x'])), 'INVALID_KEY');
      // The refused batch stored nothing, not even its valid first entry.
      assert.deepEqual(await s.getMany([k(1), k(3)]), [undefined, undefined]);
    }),
    check('refuses every call once closed; close is idempotent', async (s) => {
      await s.close();
      await s.close();
      assert.equal(await codeOf(s.getMany([k(1)])), 'CLOSED');
      assert.equal(await codeOf(s.putMany([{ key: k(1), value: testBytes(1, 8) }])), 'CLOSED');
      assert.equal(await codeOf(s.has(k(1))), 'CLOSED');
      assert.equal(await codeOf(s.countPrefix([k(1)])), 'CLOSED');
      assert.equal(await codeOf(s.delete([k(1)])), 'CLOSED');
    }),
    {
      name: 'agrees with a map under random puts, gets, deletes and prefix counts',
      run: async () => {
        for (let seq = 0; seq < (options.sequences ?? 20); seq++) {
          await withStore(options, (s) => randomOperations(s, seq));
        }
      },
    },
  ];
}

/** 60 random operations over 8 keys, each answer compared with a `Map`'s. */
async function randomOperations(s: KvBlockStore, seed: number): Promise<void> {
  const rand = seeded(seed + 1);
  const model = new Map<BlockHash, Uint8Array>();
  const keys = Array.from({ length: 8 }, (_, i) => k(`r${i}`));
  const at = (op: number, what: string) => `sequence ${seed}, operation ${op}: ${what}`;
  for (let op = 0; op < 60; op++) {
    const pick = () => keys[rand(keys.length)]!;
    switch (rand(4)) {
      case 0: {
        // Distinct keys: two writes of one key in one batch may land in either order.
        const batch = [...new Set(Array.from({ length: 1 + rand(3) }, pick))].map((key) => ({
          key,
          value: testBytes(rand(1 << 20), 1 + rand(2048)),
        }));
        assert.equal(await s.putMany(batch), batch.length, at(op, 'putMany count'));
        for (const e of batch) model.set(e.key, e.value);
        break;
      }
      case 1: {
        const ask = Array.from({ length: 1 + rand(4) }, pick);
        const got = await s.getMany(ask);
        ask.forEach((key, i) => {
          assert.ok(sameBytes(got[i], model.get(key)), at(op, `getMany of ${key}`));
        });
        break;
      }
      case 2: {
        const gone = Array.from({ length: 1 + rand(2) }, pick);
        const present = new Set(gone.filter((key) => model.has(key))).size;
        assert.equal(await s.delete([...new Set(gone)]), present, at(op, 'delete count'));
        for (const key of gone) model.delete(key);
        break;
      }
      default: {
        const chain = Array.from({ length: rand(5) }, pick);
        let n = 0;
        while (n < chain.length && model.has(chain[n]!)) n++;
        assert.equal(await s.countPrefix(chain), n, at(op, 'countPrefix'));
      }
    }
  }
}
