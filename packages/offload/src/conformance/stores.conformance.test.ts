// Every KvBlockStore of this package runs the one contract suite; each store's own test file
// keeps only what is its own (eviction, files, Redis keys and outages, tiering).
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';
import { DiskStore } from '../disk-store.js';
import { HostMemoryStore } from '../host-memory-store.js';
import { RedisStore } from '../redis-store.js';
import { type RedisServerHandle, startRedisServer } from '../testing/redis-server.js';
import { TieredStore } from '../tiered-store.js';
import { runKvBlockStoreConformance } from './vitest.js';

const dirs: string[] = [];
async function freshDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'kvasir-conformance-'));
  dirs.push(dir);
  return dir;
}

let redis: Promise<RedisServerHandle> | undefined;
let db = 0;
/** A store on a database of its own of one real redis-server (started on first use). */
async function redisStore(namespace: string): Promise<RedisStore> {
  redis ??= startRedisServer();
  const server = await redis;
  const store = new RedisStore({ namespace, url: server.url, keyPrefix: `c${db++}:` });
  if (!(await store.ready(5_000))) throw new Error('redis-server did not come up');
  return store;
}

afterAll(async () => {
  await (await redis?.catch(() => undefined))?.stop();
  await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
});

runKvBlockStoreConformance({
  name: 'HostMemoryStore',
  open: async (namespace) => new HostMemoryStore({ namespace, maxBytes: 1 << 20 }),
});

runKvBlockStoreConformance({
  name: 'DiskStore',
  open: async (namespace) =>
    DiskStore.open({ namespace, dir: await freshDir(), maxBytes: 1 << 20, checksumThreads: 0 }),
  sequences: 10,
});

runKvBlockStoreConformance({
  name: 'RedisStore',
  open: redisStore,
  sequences: 10,
});

runKvBlockStoreConformance({
  name: 'TieredStore (host, disk, Redis; write-through)',
  open: async (namespace) =>
    new TieredStore({
      tiers: [
        new HostMemoryStore({ namespace, maxBytes: 1 << 20 }),
        await DiskStore.open({ namespace, dir: await freshDir(), maxBytes: 1 << 20 }),
        await redisStore(namespace),
      ],
      writeMode: 'write-through',
    }),
  sequences: 10,
});
