// Every KV connector of the repository runs the one contract suite, over each kind of store it
// is used with.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';
import { CONFORMANCE_NAMESPACE } from '../conformance/kv-block-store-suite.js';
import { runKvConnectorConformance } from '../conformance/vitest.js';
import { DiskStore } from '../disk-store.js';
import { HostMemoryStore } from '../host-memory-store.js';
import { RedisStore } from '../redis-store.js';
import { type RedisServerHandle, startRedisServer } from '../testing/redis-server.js';
import { TieredStore } from '../tiered-store.js';
import { PrefixOffloadConnector } from './prefix-offload-connector.js';
import { SwapConnector } from './swap-connector.js';

const namespace = CONFORMANCE_NAMESPACE;
const dirs: string[] = [];
let redis: Promise<RedisServerHandle> | undefined;
let db = 0;
afterAll(async () => {
  await (await redis?.catch(() => undefined))?.stop();
  await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
});

const host = async () =>
  new TieredStore({ tiers: [new HostMemoryStore({ namespace, maxBytes: 1 << 20 })] });
const disk = async () => {
  const dir = await mkdtemp(join(tmpdir(), 'kvasir-connector-'));
  dirs.push(dir);
  return new TieredStore({ tiers: [await DiskStore.open({ namespace, dir, maxBytes: 1 << 20 })] });
};
const shared = async () => {
  redis ??= startRedisServer();
  const url = (await redis).url;
  const store = new RedisStore({ namespace, url, keyPrefix: `k${db++}:` });
  if (!(await store.ready(5_000))) throw new Error('redis-server did not come up');
  return new TieredStore({ tiers: [store] });
};
const close = (store: TieredStore) => store.close();

for (const [tier, backing] of [
  ['host', host],
  ['disk', disk],
  ['Redis', shared],
] as const) {
  runKvConnectorConformance({
    name: `PrefixOffloadConnector over ${tier}`,
    backing,
    create: (context, store) => new PrefixOffloadConnector({ ...context, store }),
    closeBacking: close,
    sharesPrefixes: true,
  });
}

runKvConnectorConformance({
  name: 'SwapConnector over host',
  backing: host,
  create: (context, store) => new SwapConnector({ device: context.device, store }),
  closeBacking: close,
  swaps: true,
});
