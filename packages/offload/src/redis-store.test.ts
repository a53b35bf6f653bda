import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { encodeFrame } from './frame.js';
import { RedisStore, type RedisStoreOptions } from './redis-store.js';
import { stagingBuffers } from './staging.js';
import { block, key, NS, OTHER_NS, sameBytes } from './testing/fixtures.js';
import { type RedisServerHandle, startRedisServer } from './testing/redis-server.js';

let server: RedisServerHandle;
let raw: Redis;
let starting: Promise<RedisServerHandle> | undefined;
const open: RedisStore[] = [];

// Started once, in beforeEach rather than beforeAll: without redis-server every test FAILS with
// the install hint (a failed beforeAll would only mark them skipped).
beforeEach(async () => {
  starting ??= startRedisServer();
  server = await starting;
  if (raw === undefined) {
    raw = new Redis(server.url, { maxRetriesPerRequest: 1 });
    raw.on('error', () => undefined); // the outage test kills the server under it
  }
});
afterAll(async () => {
  raw?.disconnect();
  await (await starting?.catch(() => undefined))?.stop();
});
afterEach(async () => {
  await Promise.all(open.splice(0).map((s) => s.close()));
  if (raw?.status === 'ready') await raw.flushall();
});

async function store(extra: Partial<RedisStoreOptions> = {}): Promise<RedisStore> {
  const s = new RedisStore({ namespace: NS, url: server.url, ...extra });
  open.push(s);
  expect(await s.ready(5000)).toBe(true);
  return s;
}

describe('RedisStore', () => {
  it('round-trips blocks, one Redis string per block under the prefixed key', async () => {
    const s = await store({ keyPrefix: 'test:' });
    const entries = [0, 1, 2].map((i) => ({ key: key(i), value: block(i, 10_000 + i) }));
    expect(await s.putMany(entries)).toBe(3);
    const got = await s.getMany([key(2), key(5), key(0), key(1)]);
    expect(sameBytes(got[0], entries[2]?.value)).toBe(true);
    expect(got[1]).toBeUndefined();
    expect(sameBytes(got[2], entries[0]?.value)).toBe(true);
    expect(sameBytes(got[3], entries[1]?.value)).toBe(true);
    expect(await raw.exists(`test:${NS}:${key(0)}`)).toBe(1);
    expect((await raw.keys('*')).length).toBe(3);
    expect(s.stats()).toMatchObject({ hits: 3, misses: 1, puts: 3, errors: 0, status: 'ready' });
  });

  it('puts from staging buffers (checksummed in place), which are free to reuse at once', async () => {
    const s = await store();
    const staged = stagingBuffers(2, 70_001);
    const want = [block(20, 70_001), block(21, 70_001)];
    staged.forEach((b, i) => {
      b.set(want[i] as Uint8Array);
    });
    expect(await s.putMany(staged.map((value, i) => ({ key: key(i), value })))).toBe(2);
    for (const b of staged) b.fill(7);
    const got = await s.getMany([key(0), key(1)]);
    expect(sameBytes(got[0], want[0])).toBe(true);
    expect(sameBytes(got[1], want[1])).toBe(true);
    expect(s.stats()).toMatchObject({ hits: 2, corrupt: 0, errors: 0 });
  });

  it('splits large batches into several pipelines', async () => {
    const s = await store({ maxBatchBytes: 3000 });
    const entries = Array.from({ length: 10 }, (_, i) => ({ key: key(i), value: block(i, 1000) }));
    expect(await s.putMany(entries)).toBe(10);
    const got = await s.getMany(entries.map((e) => e.key));
    got.forEach((v, i) => {
      expect(sameBytes(v, entries[i]?.value)).toBe(true);
    });
  });

  it('sets a TTL when asked', async () => {
    const s = await store({ ttlSeconds: 60 });
    await s.putMany([{ key: key(1), value: block(1, 10) }]);
    const ttl = await raw.ttl(s.redisKey(key(1)));
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(60);
  });

  it.each(['flipped byte', 'truncated', 'foreign namespace', 'not a frame'] as const)(
    'treats a %s value as a miss, deletes it and counts it',
    async (what) => {
      const s = await store();
      const value = block(3, 5000);
      await s.putMany([{ key: key(3), value }]);
      const rk = s.redisKey(key(3));
      const stored = (await raw.getBuffer(rk)) as Buffer;
      if (what === 'flipped byte') {
        stored[stored.length - 7] = (stored[stored.length - 7] ?? 0) ^ 0x80;
        await raw.set(rk, stored);
      } else if (what === 'truncated') {
        await raw.set(rk, stored.subarray(0, stored.length - 1000));
      } else if (what === 'foreign namespace') {
        await raw.set(rk, Buffer.from(encodeFrame(OTHER_NS, key(3), value)));
      } else {
        await raw.set(rk, 'hello');
      }
      expect(await s.getMany([key(3)])).toEqual([undefined]);
      expect(await raw.exists(rk)).toBe(0);
      const st = s.stats();
      expect(what === 'foreign namespace' ? st.foreign : st.corrupt).toBe(1);
    },
  );

  it('lets two replicas sharing one Redis see each other\u2019s prefix blocks', async () => {
    const a = await store();
    const b = await store();
    const prefix = [0, 1, 2, 3].map(key);
    await a.putMany(prefix.slice(0, 3).map((k, i) => ({ key: k, value: block(i, 4096) })));
    expect(await b.countPrefix(prefix)).toBe(3);
    const got = await b.getMany(prefix.slice(0, 3));
    got.forEach((v, i) => {
      expect(sameBytes(v, block(i, 4096))).toBe(true);
    });
    // A replica with another layout shares the server, never the blocks.
    const c = new RedisStore({ namespace: OTHER_NS, url: server.url });
    open.push(c);
    await c.ready(5000);
    expect(await c.countPrefix(prefix)).toBe(0);
  });

  it('never returns a torn value under concurrent writes of the same key', async () => {
    const a = await store();
    const b = await store();
    const k = key('hot');
    const v1 = block(1, 512 * 1024);
    const v2 = block(2, 512 * 1024);
    await a.putMany([{ key: k, value: v1 }]);
    for (let round = 0; round < 20; round++) {
      const [, , r1, r2] = await Promise.all([
        a.putMany([{ key: k, value: round % 2 ? v1 : v2 }]),
        b.putMany([{ key: k, value: round % 2 ? v2 : v1 }]),
        b.getMany([k]),
        a.getMany([k]),
      ]);
      for (const [v] of [r1, r2]) expect(sameBytes(v, v1) || sameBytes(v, v2)).toBe(true);
    }
    expect(a.stats().corrupt + b.stats().corrupt).toBe(0);
  });

  it('answers misses while Redis is down and recovers when it returns', async () => {
    const s = await store({ commandTimeoutMs: 2000 });
    await s.putMany([{ key: key(1), value: block(1, 1000) }]);
    await server.kill();
    // Every call resolves (no throw, no hang) with misses or nothing stored.
    for (let i = 0; i < 3; i++) {
      expect(await s.getMany([key(1)])).toEqual([undefined]);
      expect(await s.countPrefix([key(1)])).toBe(0);
      expect(await s.putMany([{ key: key(2), value: block(2, 10) }])).toBe(0);
    }
    const down = s.stats();
    expect(down.errors).toBeGreaterThan(0);
    expect(down.misses).toBeGreaterThanOrEqual(3);
    await server.restart();
    expect(await s.ready(10_000)).toBe(true);
    expect(await s.putMany([{ key: key(1), value: block(1, 1000) }])).toBe(1);
    expect(sameBytes((await s.getMany([key(1)]))[0], block(1, 1000))).toBe(true);
  });

  it('answers misses at once when Redis was never reachable', async () => {
    const s = new RedisStore({ namespace: NS, url: 'redis://127.0.0.1:1', connectTimeoutMs: 200 });
    open.push(s);
    expect(await s.getMany([key(1)])).toEqual([undefined]);
    expect(await s.putMany([{ key: key(1), value: block(1, 10) }])).toBe(0);
    expect(await s.has(key(1))).toBe(false);
    expect(s.stats().unavailable).toBeGreaterThan(0);
  });

  // The rest of the KvBlockStore contract (prefixes, misuse, closing) is checked by
  // conformance/stores.conformance.test.ts.
  it('refuses a TTL that is not a positive number of seconds', () => {
    expect(() => new RedisStore({ namespace: NS, url: server.url, ttlSeconds: 0 })).toThrow(
      /ttlSeconds/,
    );
  });
});
