// The Redis tier on a real 6-node Redis Cluster (3 masters, 3 replicas) reached through a
// `redis+cluster://` URL, as `--offload-redis-url` takes it: the KvBlockStore contract, blocks
// spread over every master, and a master killed mid-traffic (misses and skipped writes while it
// fails over, never an exception or wrong bytes; full service once its replica is promoted).
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { runKvBlockStoreConformance } from './conformance/vitest.js';
import { RedisStore } from './redis-store.js';
import { block, key, NS, sameBytes } from './testing/fixtures.js';
import { type RedisClusterHandle, startRedisCluster } from './testing/redis-server.js';

let starting: Promise<RedisClusterHandle> | undefined;
/** The cluster, started on first use and shared by the file (each store has its own key prefix). */
function cluster(): Promise<RedisClusterHandle> {
  starting ??= startRedisCluster({ nodes: 6, replicas: 1, nodeTimeoutMs: 1000 });
  return starting;
}
const admins: Redis[] = [];
afterAll(async () => {
  for (const a of admins) a.disconnect();
  await (await starting?.catch(() => undefined))?.stop();
});

function clusterUrl(c: RedisClusterHandle): string {
  return `redis+cluster://${c.startupNodes.map((n) => `${n.host}:${n.port}`).join(',')}`;
}

/** A plain connection to one node, for looking at the cluster from outside the store. */
function admin(port: number): Redis {
  const r = new Redis({ port, host: '127.0.0.1', lazyConnect: false, maxRetriesPerRequest: 1 });
  r.on('error', () => undefined);
  admins.push(r);
  return r;
}

let prefixes = 0;
async function openStore(namespace: string, keyPrefix = `c${prefixes++}:`): Promise<RedisStore> {
  const c = await cluster();
  const store = new RedisStore({ namespace, url: clusterUrl(c), keyPrefix });
  if (!(await store.ready(10_000))) throw new Error('Redis Cluster client not ready');
  return store;
}

/** `CLUSTER SLOTS` as seen from `port`: slot → master port. */
async function slotOwners(port: number): Promise<(slot: number) => number | undefined> {
  const ranges = await admin(port).cluster('SLOTS');
  return (slot) => ranges.find(([a, b]) => slot >= a && slot <= b)?.[2]?.[1];
}

runKvBlockStoreConformance({
  name: 'RedisStore on a 6-node Redis Cluster (redis+cluster://)',
  open: (namespace) => openStore(namespace),
  sequences: 8,
});

describe('RedisStore on a 6-node Redis Cluster with replicas', () => {
  it('keeps each block in one key (one slot) and spreads the blocks over every master', async () => {
    const c = await cluster();
    const store = await openStore(NS, 'spread:');
    const entries = Array.from({ length: 48 }, (_, i) => ({ key: key(i), value: block(i, 2048) }));
    expect(await store.putMany(entries)).toBe(48);
    const masters = new Set<number>();
    const owners = await slotOwners(c.nodes[0]!.port);
    for (const e of entries) {
      const slot = (await admin(c.nodes[0]!.port).cluster(
        'KEYSLOT',
        store.redisKey(e.key),
      )) as number;
      masters.add(owners(slot)!);
    }
    expect(masters.size).toBe(3);
    // One key per block, on its master only: the keys over the masters add up to the blocks.
    let keys = 0;
    for (const port of masters) keys += (await admin(port).keys('spread:*')).length;
    expect(keys).toBe(48);
    const got = await store.getMany(entries.map((e) => e.key));
    expect(got.every((v, i) => sameBytes(v, entries[i]!.value))).toBe(true);
    await store.close();
  });

  it('a master killed mid-traffic gives misses, not errors, then recovers on its promoted replica', async () => {
    const c = await cluster();
    const store = await openStore(NS, 'failover:');
    const written = new Map<string, Uint8Array>();
    const first = Array.from({ length: 32 }, (_, i) => ({ key: key(i), value: block(i, 4096) }));
    expect(await store.putMany(first)).toBe(32);
    for (const e of first) written.set(e.key, e.value);

    const seed = c.nodes[0]!.port;
    const owners = await slotOwners(seed);
    const slot = (await admin(seed).cluster('KEYSLOT', store.redisKey(key(0)))) as number;
    const victimPort = owners(slot)!;
    const victim = c.nodes.find((n) => n.port === victimPort)!;
    // The replica has the blocks before its master dies (replication is asynchronous).
    const replicaOf = async (): Promise<number> => {
      for (const n of c.nodes) {
        if (n.port === victimPort) continue;
        const info = await admin(n.port).info('replication');
        if (info.includes('role:slave') && info.includes(`master_port:${victimPort}`)) {
          return n.port;
        }
      }
      return -1;
    };
    const replicaPort = await replicaOf();
    expect(replicaPort).toBeGreaterThan(0);
    const victimKeys = await admin(victimPort).dbsize();
    for (let t = 0; (await admin(replicaPort).dbsize()) < victimKeys; t++) {
      expect(t).toBeLessThan(200);
      await new Promise((r) => setTimeout(r, 25));
    }
    const survivor = c.nodes.find((n) => n.port !== victimPort && n.port !== replicaPort)!.port;

    await victim.kill();
    const errorsBefore = store.stats().errors;
    let misses = 0;
    let round = 0;
    let recovered = false;
    const deadline = Date.now() + 40_000;
    while (Date.now() < deadline) {
      round++;
      // Traffic goes on: every call returns, every hit is the block written under that key.
      const fresh = { key: key(`r${round}`), value: block(1000 + round, 4096) };
      const stored = await store.putMany([fresh]);
      if (stored === 1) written.set(fresh.key, fresh.value);
      const keys = [...written.keys()];
      const got = await store.getMany(keys);
      for (let i = 0; i < keys.length; i++) {
        const v = got[i];
        if (v === undefined) misses++;
        else expect(sameBytes(v, written.get(keys[i]!))).toBe(true);
      }
      const promoted = (await slotOwners(survivor))(slot) === replicaPort;
      if (promoted && stored === 1 && got.every((v) => v !== undefined)) {
        recovered = true;
        break;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    expect({ recovered, degraded: misses > 0 || store.stats().errors > errorsBefore }).toEqual({
      recovered: true,
      degraded: true,
    });
    // Recovered: a new batch over every slot is stored and read back whole.
    const after = Array.from({ length: 24 }, (_, i) => ({
      key: key(`after${i}`),
      value: block(2000 + i, 4096),
    }));
    expect(await store.putMany(after)).toBe(24);
    const back = await store.getMany(after.map((e) => e.key));
    expect(back.every((v, i) => sameBytes(v, after[i]!.value))).toBe(true);
    expect(await store.has(key(0))).toBe(true);
    await store.close();
  }, 90_000);
});
