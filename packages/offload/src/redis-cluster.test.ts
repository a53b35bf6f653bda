import { Cluster } from 'ioredis';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { RedisStore } from './redis-store.js';
import { block, key, NS, sameBytes } from './testing/fixtures.js';
import { type RedisClusterHandle, startRedisCluster } from './testing/redis-server.js';

let cluster: RedisClusterHandle;
let client: Cluster;
let starting: Promise<RedisClusterHandle> | undefined;

// beforeEach, not beforeAll: without redis-server every test fails with the install hint.
beforeEach(async () => {
  if (starting !== undefined) {
    await starting;
    return;
  }
  starting = startRedisCluster({ nodes: 3 });
  cluster = await starting;
  client = new Cluster([...cluster.startupNodes], {
    enableOfflineQueue: false,
    enableAutoPipelining: true,
    redisOptions: { connectTimeout: 1000, commandTimeout: 5000, maxRetriesPerRequest: 1 },
  });
  client.on('error', () => undefined);
  await new Promise<void>((resolve, reject) => {
    client.once('ready', () => resolve());
    client.once('end', () => reject(new Error('cluster client ended before ready')));
  });
});
afterAll(async () => {
  client?.disconnect();
  await (await starting?.catch(() => undefined))?.stop();
});

describe('RedisStore on Redis Cluster', () => {
  it('stores blocks across slots on several nodes with single-key commands only', async () => {
    const s = new RedisStore({ namespace: NS, client });
    const entries = Array.from({ length: 24 }, (_, i) => ({ key: key(i), value: block(i, 3000) }));
    expect(await s.putMany(entries)).toBe(24);
    const got = await s.getMany(entries.map((e) => e.key));
    for (let i = 0; i < got.length; i++) expect(sameBytes(got[i], entries[i]?.value)).toBe(true);
    expect(await s.countPrefix([...entries.slice(0, 10).map((e) => e.key), key(99), key(0)])).toBe(
      10,
    );
    // The blocks really are spread: more than one node holds some.
    const sizes = await Promise.all(client.nodes('master').map((n) => n.dbsize()));
    expect(sizes.filter((n) => n > 0).length).toBeGreaterThan(1);
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(24);
    expect(await s.delete([key(0), key(1), key(99)])).toBe(2);
    expect(await s.has(key(0))).toBe(false);
    expect(s.stats().errors).toBe(0);
    await s.close();
    expect(client.status).toBe('ready'); // a client passed in is not closed by the store
  });
});
