import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BlockHash } from '@kvasir/kv-allocator';
import fc from 'fast-check';
import { afterAll, afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { DiskStore } from './disk-store.js';
import { HostMemoryStore } from './host-memory-store.js';
import { RedisStore } from './redis-store.js';
import { block, key, NS, OTHER_NS, sameBytes } from './testing/fixtures.js';
import { type RedisServerHandle, startRedisServer } from './testing/redis-server.js';
import { TieredStore } from './tiered-store.js';
import type { KvBlockEntry, KvBlockStore, OffloadStats } from './types.js';

let server: RedisServerHandle;
let starting: Promise<RedisServerHandle> | undefined;
let dir: string;
// beforeEach, not beforeAll: without redis-server every test fails with the install hint.
beforeEach(async () => {
  starting ??= startRedisServer();
  server = await starting;
});
afterAll(async () => {
  await (await starting?.catch(() => undefined))?.stop();
});
afterEach(async () => {
  vi.useRealTimers();
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
});

async function threeTiers(hostBytes: number, diskBytes: number, prefix: string) {
  dir = await mkdtemp(join(tmpdir(), 'kvasir-tiered-'));
  const host = new HostMemoryStore({ namespace: NS, maxBytes: hostBytes });
  const disk = await DiskStore.open({ namespace: NS, dir, maxBytes: diskBytes });
  const redis = new RedisStore({ namespace: NS, url: server.url, keyPrefix: prefix });
  expect(await redis.ready(5000)).toBe(true);
  return { host, disk, redis };
}

/** A tier whose lookups wait until the test releases them, or fail. */
class ControlledStore implements KvBlockStore {
  readonly tier = 'controlled';
  readonly namespace = NS;
  readonly maxValueBytes = 1 << 20;
  readonly data = new Map<BlockHash, Uint8Array>();
  readonly waiting: (() => void)[] = [];
  calls = 0;
  mode: 'hold' | 'fail' | 'answer' = 'hold';

  async putMany(entries: readonly KvBlockEntry[]): Promise<number> {
    for (const e of entries) this.data.set(e.key, e.value.slice());
    return entries.length;
  }
  async getMany(keys: readonly BlockHash[]): Promise<(Uint8Array | undefined)[]> {
    this.calls++;
    if (this.mode === 'fail') throw new Error('backend exploded');
    if (this.mode === 'hold') await new Promise<void>((r) => this.waiting.push(r));
    return keys.map((k) => this.data.get(k)?.slice());
  }
  async has(k: BlockHash): Promise<boolean> {
    return this.data.has(k);
  }
  async countPrefix(keys: readonly BlockHash[]): Promise<number> {
    if (this.mode === 'hold') await new Promise<void>((r) => this.waiting.push(r));
    let n = 0;
    while (n < keys.length && this.data.has(keys[n] as BlockHash)) n++;
    return n;
  }
  async delete(keys: readonly BlockHash[]): Promise<number> {
    let n = 0;
    for (const k of keys) if (this.data.delete(k)) n++;
    return n;
  }
  stats(): OffloadStats {
    return new HostMemoryStore({ namespace: NS, maxBytes: 1 }).stats();
  }
  async close(): Promise<void> {}
  release(): void {
    for (const w of this.waiting.splice(0)) w();
  }
}

describe('TieredStore', () => {
  it('writes through every tier and reads from the fastest that has the block', async () => {
    const { host, disk, redis } = await threeTiers(1 << 20, 1 << 20, 'wt:');
    const t = new TieredStore({ tiers: [host, disk, redis] });
    const entries = [0, 1, 2].map((i) => ({ key: key(i), value: block(i, 2000) }));
    expect(await t.putMany(entries)).toBe(3);
    for (const s of [host, disk, redis])
      expect(await s.countPrefix(entries.map((e) => e.key))).toBe(3);
    const r = await t.fetch([key(0), key(1), key(9)]);
    expect([...r.servedBy]).toEqual([0, 0, -1]);
    expect(sameBytes(r.values[1], entries[1]?.value)).toBe(true);
    expect(r.expired).toBe(0);
    await t.close();
  });

  it('promotes a lower-tier hit to the tiers above it', async () => {
    const { host, disk, redis } = await threeTiers(1 << 20, 1 << 20, 'promo:');
    const t = new TieredStore({ tiers: [host, disk, redis] });
    await redis.putMany([{ key: key(5), value: block(5, 3000) }]);
    await disk.putMany([{ key: key(6), value: block(6, 3000) }]);
    const r = await t.fetch([key(5), key(6)]);
    expect([...r.servedBy]).toEqual([2, 1]);
    expect(sameBytes(r.values[0], block(5, 3000))).toBe(true);
    await t.drain();
    expect(await host.countPrefix([key(5), key(6)])).toBe(2);
    expect(await disk.has(key(5))).toBe(true);
    const again = await t.fetch([key(5), key(6)]);
    expect([...again.servedBy]).toEqual([0, 0]);
    expect(sameBytes(again.values[0], block(5, 3000))).toBe(true);
    expect(t.stats().hitsByTier).toEqual([2, 1, 1]);
    await t.close();
  });

  it('write-back demotes what the host evicts to disk, and disk evictions to Redis', async () => {
    const { host, disk, redis } = await threeTiers(2 * 1000, 3 * 1200, 'wb:');
    const t = new TieredStore({
      tiers: [host, disk, redis],
      writeMode: 'write-back',
      maxConcurrentTransfers: 1, // demotions land in eviction order
    });
    const keys = Array.from({ length: 8 }, (_, i) => key(i));
    for (let i = 0; i < keys.length; i++)
      await t.putMany([{ key: keys[i] as string, value: block(i, 1000) }]);
    await t.drain();
    expect(host.keys()).toEqual(keys.slice(6));
    expect(disk.keys().sort()).toEqual(keys.slice(3, 6).sort());
    expect(await redis.countPrefix(keys)).toBe(3);
    expect(t.stats().demotions).toBe(6 + 3);
    // Every block is still served, from wherever it went, byte for byte.
    const r = await t.fetch(keys);
    r.values.forEach((v, i) => {
      expect(sameBytes(v, block(i, 1000))).toBe(true);
    });
    expect(r.servedBy[0]).toBe(2);
    expect(r.servedBy[4]).toBe(1);
    await t.close();
  });

  it('flushes what only the host holds to disk, so a restart finds it', async () => {
    const { host, disk, redis } = await threeTiers(1 << 20, 1 << 20, 'flush:');
    const t = new TieredStore({ tiers: [host, disk, redis], writeMode: 'write-back' });
    await t.putMany([0, 1, 2].map((i) => ({ key: key(i), value: block(i, 500) })));
    expect(disk.stats().entries).toBe(0);
    expect(await t.flush(2)).toBe(3);
    await t.close();
    const reopened = await DiskStore.open({ namespace: NS, dir, maxBytes: 1 << 20 });
    const got = await reopened.getMany([0, 1, 2].map(key));
    for (let i = 0; i < 3; i++) expect(sameBytes(got[i], block(i, 500))).toBe(true);
  });

  it('counts a prefix spread over several tiers', async () => {
    const { host, disk, redis } = await threeTiers(1 << 20, 1 << 20, 'cp:');
    const t = new TieredStore({ tiers: [host, disk, redis] });
    await host.putMany([
      { key: key(0), value: block(0, 10) },
      { key: key(3), value: block(3, 10) },
    ]);
    await redis.putMany([{ key: key(1), value: block(1, 10) }]);
    await disk.putMany([{ key: key(2), value: block(2, 10) }]);
    expect(await t.countPrefix([0, 1, 2, 3, 4, 5].map(key))).toBe(4);
    expect(await t.has(key(2))).toBe(true);
    expect(await t.has(key(4))).toBe(false);
    expect(await t.delete([key(0), key(1)])).toBe(1);
    expect(await t.countPrefix([0, 1].map(key))).toBe(0);
    await t.close();
  });

  it('answers at the deadline with misses and drops a block that arrives later', async () => {
    vi.useFakeTimers();
    const host = new HostMemoryStore({ namespace: NS, maxBytes: 1 << 20 });
    const slow = new ControlledStore();
    await slow.putMany([{ key: key(1), value: block(1, 64) }]);
    await host.putMany([{ key: key(0), value: block(0, 64) }]);
    const t = new TieredStore({ tiers: [host, slow] });
    const pending = t.fetch([key(0), key(1)], { deadlineMs: 50 });
    await vi.advanceTimersByTimeAsync(50);
    const r = await pending;
    expect([...r.servedBy]).toEqual([0, -1]);
    expect(sameBytes(r.values[0], block(0, 64))).toBe(true);
    expect(r.values[1]).toBeUndefined();
    expect(r.expired).toBe(1);
    slow.release();
    await vi.runAllTimersAsync();
    await t.drain();
    expect(r.values[1]).toBeUndefined(); // the late block never reaches the caller's result
    expect(t.stats()).toMatchObject({ expired: 1, lateDropped: 1 });
    expect(await host.has(key(1))).toBe(false);
  });

  it('expires a transfer that waited in the queue past its deadline without running it', async () => {
    vi.useFakeTimers();
    const host = new HostMemoryStore({ namespace: NS, maxBytes: 1 << 20 });
    const slow = new ControlledStore();
    await slow.putMany([{ key: key(1), value: block(1, 64) }]);
    const t = new TieredStore({ tiers: [host, slow], maxConcurrentTransfers: 1 });
    const first = t.fetch([key(1)], { deadlineMs: 1000 });
    await vi.advanceTimersByTimeAsync(0);
    const second = t.fetch([key(1)], { deadlineMs: 10 });
    await vi.advanceTimersByTimeAsync(10);
    expect((await second).expired).toBe(1);
    slow.release();
    await vi.advanceTimersByTimeAsync(0);
    const r1 = await first;
    expect(sameBytes(r1.values[0], block(1, 64))).toBe(true);
    await vi.advanceTimersByTimeAsync(20);
    await t.drain();
    expect(slow.calls).toBe(1); // the expired job never reached the backend
  });

  it('rejects fetches beyond the queue bound at once', async () => {
    const host = new HostMemoryStore({ namespace: NS, maxBytes: 1 << 20 });
    const slow = new ControlledStore();
    const t = new TieredStore({
      tiers: [host, slow],
      maxConcurrentTransfers: 1,
      maxQueuedTransfers: 1,
    });
    const a = t.fetch([key(1)], { deadlineMs: 60_000 });
    const b = t.fetch([key(2)], { deadlineMs: 60_000 });
    await new Promise((r) => setImmediate(r));
    const c = await t.fetch([key(3)], { deadlineMs: 60_000 }); // queue full: a miss, now
    expect(c.values).toEqual([undefined]);
    expect(t.stats().rejected).toBe(1);
    slow.release();
    await new Promise((r) => setImmediate(r));
    slow.release();
    await Promise.all([a, b]);
  });

  it('keeps serving after a tier throws (the queue survives failures)', async () => {
    const host = new HostMemoryStore({ namespace: NS, maxBytes: 1 << 20 });
    const flaky = new ControlledStore();
    await flaky.putMany([{ key: key(1), value: block(1, 64) }]);
    flaky.mode = 'fail';
    const t = new TieredStore({ tiers: [host, flaky] });
    for (let i = 0; i < 5; i++) expect((await t.fetch([key(1)])).values).toEqual([undefined]);
    expect(t.stats().failedTransfers).toBe(5);
    flaky.mode = 'answer';
    expect(sameBytes((await t.getMany([key(1)]))[0], block(1, 64))).toBe(true);
  });

  it('keeps serving from host and disk while Redis is down', async () => {
    const { host, disk, redis } = await threeTiers(1 << 20, 1 << 20, 'down:');
    const t = new TieredStore({ tiers: [host, disk, redis] });
    await server.kill();
    expect(await t.putMany([{ key: key(1), value: block(1, 100) }])).toBe(1);
    const r = await t.fetch([key(1), key(2)]);
    expect([...r.servedBy]).toEqual([0, -1]);
    expect(t.stats().tiers[2]?.errors).toBeGreaterThan(0);
    await server.restart();
    expect(await redis.ready(10_000)).toBe(true);
    await t.close();
  });

  it('refuses a block some tier could not hold before storing it anywhere', async () => {
    const big = new HostMemoryStore({ namespace: NS, maxBytes: 10_000 });
    const small = new HostMemoryStore({ namespace: NS, maxBytes: 1000 });
    const t = new TieredStore({ tiers: [big, small] });
    expect(t.maxValueBytes).toBe(1000);
    await expect(t.putMany([{ key: key(1), value: block(1, 1001) }])).rejects.toMatchObject({
      code: 'VALUE_TOO_LARGE',
    });
    expect(big.stats().entries).toBe(0);
  });

  it('answers by the deadline while Redis hangs, and recovers when it resumes', async () => {
    const { host, disk, redis } = await threeTiers(1 << 20, 1 << 20, 'hang:');
    const t = new TieredStore({ tiers: [host, disk, redis] });
    await redis.putMany([{ key: key(1), value: block(1, 100) }]);
    server.pause(); // SIGSTOP: connected, but silent
    try {
      const r = await t.fetch([key(1)], { deadlineMs: 200 });
      expect(r.values).toEqual([undefined]);
      expect(r.expired).toBe(1);
    } finally {
      server.resume();
    }
    await t.drain(); // the stalled transfer finishes (or times out) and frees its slot
    const again = await t.fetch([key(1)], { deadlineMs: 10_000 });
    expect(sameBytes(again.values[0], block(1, 100))).toBe(true);
    await t.close();
  });

  it('only ever serves the bytes written for a key, within every budget (property)', async () => {
    dir = await mkdtemp(join(tmpdir(), 'kvasir-tiered-prop-'));
    let run = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('write-through' as const, 'write-back' as const),
        fc.array(fc.tuple(fc.constantFrom('put', 'get', 'del'), fc.integer({ min: 0, max: 9 })), {
          minLength: 1,
          maxLength: 30,
        }),
        async (writeMode, ops) => {
          // Content-addressed: a key's bytes are a function of the key (sizes differ per key).
          const bytesOf = (k: number) => block(k, 200 + 37 * k);
          const host = new HostMemoryStore({ namespace: NS, maxBytes: 700 });
          const disk = await DiskStore.open({
            namespace: NS,
            dir: join(dir, String(run++)),
            maxBytes: 1500,
          });
          const t = new TieredStore({ tiers: [host, disk], writeMode, maxConcurrentTransfers: 2 });
          for (const [op, k] of ops) {
            if (op === 'put') await t.putMany([{ key: key(k), value: bytesOf(k) }]);
            else if (op === 'del') await t.delete([key(k)]);
            else {
              const [v] = await t.getMany([key(k)]);
              if (v !== undefined && !sameBytes(v, bytesOf(k))) return false;
            }
            if ((host.stats().bytes ?? 0) > 700 || (disk.stats().bytes ?? 0) > 1500) return false;
          }
          await t.drain();
          const all = await t.getMany([0, 1, 2, 3, 4, 5, 6, 7, 8, 9].map(key));
          const ok = all.every((v, k) => v === undefined || sameBytes(v, bytesOf(k)));
          await t.close();
          return ok && (host.stats().bytes ?? 0) <= 700 && (disk.stats().bytes ?? 0) <= 1500;
        },
      ),
      { numRuns: 30 },
    );
  });

  it('refuses tiers of different namespaces and bad options', () => {
    const a = new HostMemoryStore({ namespace: NS, maxBytes: 10 });
    const b = new HostMemoryStore({ namespace: OTHER_NS, maxBytes: 10 });
    expect(() => new TieredStore({ tiers: [a, b] })).toThrow(/namespace/);
    expect(() => new TieredStore({ tiers: [] })).toThrow(/at least one tier/);
    expect(() => new TieredStore({ tiers: [a], maxQueuedTransfers: 0 })).toThrow(
      /maxQueuedTransfers/,
    );
  });
});
