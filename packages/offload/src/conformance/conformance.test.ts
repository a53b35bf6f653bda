// The suites can fail: each check that matters is shown rejecting a subject broken in the way it
// guards against. And the connector contract's define / validate pair.
import { describe, expect, it } from 'vitest';
import {
  defineKvConnector,
  type KvConnectorContext,
  validateKvConnector,
} from '../connectors/kv-connector.js';
import { PrefixOffloadConnector } from '../connectors/prefix-offload-connector.js';
import { HostMemoryStore } from '../host-memory-store.js';
import { TieredStore } from '../tiered-store.js';
import type { KvBlockStore } from '../types.js';
import type { ConformanceCheck } from './check.js';
import { CONFORMANCE_NAMESPACE, kvBlockStoreChecks } from './kv-block-store-suite.js';
import { kvConnectorChecks } from './kv-connector-suite.js';

function named(checks: readonly ConformanceCheck[], prefix: string): ConformanceCheck {
  const c = checks.find((x) => x.name.startsWith(prefix));
  if (!c) throw new Error(`no check named ${prefix}`);
  return c;
}

/** A host store with one method replaced. */
function broken(override: Partial<KvBlockStore>) {
  return async (namespace: string) => {
    const store = new HostMemoryStore({ namespace, maxBytes: 1 << 20 });
    return Object.assign(store, override);
  };
}

describe('the KvBlockStore suite', () => {
  it('passes a correct store and fails one that over-counts a prefix', async () => {
    const good = kvBlockStoreChecks({ name: 'good', open: broken({}), sequences: 3 });
    for (const c of good) await c.run();
    const overCounting = kvBlockStoreChecks({
      name: 'over-counting',
      open: async (namespace) => {
        const store = new HostMemoryStore({ namespace, maxBytes: 1 << 20 });
        const count = store.countPrefix.bind(store);
        return Object.assign(store, {
          countPrefix: async (keys: readonly string[]) =>
            Math.min(keys.length, (await count(keys)) + 1),
        });
      },
      sequences: 3,
    });
    await expect(named(overCounting, 'counts a present prefix').run()).rejects.toThrow();
    await expect(named(overCounting, 'agrees with a map').run()).rejects.toThrow(/countPrefix/);
  });

  it('fails a store that keeps a stale value or shares its buffer with the caller', async () => {
    const stale = kvBlockStoreChecks({
      name: 'stale',
      open: async (namespace) => {
        const store = new HostMemoryStore({ namespace, maxBytes: 1 << 20 });
        const put = store.putMany.bind(store);
        return Object.assign(store, {
          putMany: async (entries: Parameters<KvBlockStore['putMany']>[0]) => {
            const fresh = entries.filter((e) => !store.keys().includes(e.key));
            await put(fresh);
            return entries.length;
          },
        });
      },
      sequences: 5,
    });
    await expect(named(stale, 'overwrites a key').run()).rejects.toThrow();
    await expect(named(stale, 'agrees with a map').run()).rejects.toThrow(/getMany/);
    const sharing = kvBlockStoreChecks({
      name: 'sharing',
      open: async (namespace) =>
        new HostMemoryStore({ namespace, maxBytes: 1 << 20, copyOnGet: false }),
    });
    await expect(named(sharing, 'keeps its own copy').run()).rejects.toThrow(/got buffer/);
  });
});

describe('the KV connector suite', () => {
  const host = async () =>
    new TieredStore({
      tiers: [new HostMemoryStore({ namespace: CONFORMANCE_NAMESPACE, maxBytes: 1 << 20 })],
    });

  it('fails a prefix connector that imports wrong bytes', async () => {
    const checks = kvConnectorChecks({
      name: 'zeroing',
      backing: host,
      create: (context: KvConnectorContext, store: TieredStore) =>
        new PrefixOffloadConnector({
          ...context,
          store,
          device: {
            ...context.device,
            readBlocks: (b) => context.device.readBlocks(b),
            writeBlocks: (blocks, data) =>
              context.device.writeBlocks(
                blocks,
                data.map((d) => new Uint8Array(d.byteLength)),
              ),
          },
        }),
      closeBacking: (s) => s.close(),
      sharesPrefixes: true,
    });
    await expect(named(checks, 'imports the prefix').run()).rejects.toThrow(/holds other bytes/);
  });

  it('fails a connector that reserves blocks and never commits or aborts them', async () => {
    const checks = kvConnectorChecks({
      name: 'leaky',
      backing: async () => undefined,
      create: (context) =>
        defineKvConnector({
          name: 'leaky',
          onAdmit: async ({ promptTokens }) => {
            context.kvCache.reserveExternal(promptTokens, {
              extraKeys: context.extraKeys,
              maxBlocks: 2,
            });
            return 0;
          },
          close: async () => {},
        }),
    });
    await expect(named(checks, 'admits a prompt nothing holds').run()).rejects.toThrow(/leaked/);
  });

  it('fails a swap connector that loses a block without saying so', async () => {
    const checks = kvConnectorChecks({
      name: 'forgetful',
      backing: async () => undefined,
      create: () =>
        defineKvConnector({
          name: 'forgetful',
          beforeForward: async () => undefined,
          close: async () => {},
        }),
      swaps: true,
    });
    await expect(named(checks, 'swaps blocks out').run()).rejects.toThrow(/block 7/);
    await expect(named(checks, 'reports a request').run()).rejects.toThrow();
  });
});

describe('defineKvConnector / validateKvConnector', () => {
  const close = async () => {};

  it('stamps the version and keeps a getter a getter', () => {
    let pending = false;
    const c = defineKvConnector({
      name: 'x',
      get hasPendingWork() {
        return pending;
      },
      betweenSteps: async () => {
        pending = false;
      },
      close,
    });
    expect(c.specificationVersion).toBe('v1');
    expect(c.hasPendingWork).toBe(false);
    pending = true;
    expect(c.hasPendingWork).toBe(true);
  });

  it.each([
    [null, /must be an object/],
    [{ name: 'x', close }, /no specificationVersion: make it with defineKvConnector/],
    [
      { specificationVersion: 'v2', name: 'x', close },
      /"v2" is not supported \(this version implements 'v1'\)/,
    ],
    [{ specificationVersion: 'v1', name: '', close }, /non-empty name/],
    [{ specificationVersion: 'v1', name: 'x' }, /missing the function "close"/],
    [{ specificationVersion: 'v1', name: 'x', close, onAdmit: 1 }, /onAdmit must be a function/],
    [{ specificationVersion: 'v1', name: 'x', close, hasPendingWork: false }, /no betweenSteps/],
  ])('refuses %j with INVALID_CONNECTOR naming the fix', (value, message) => {
    expect(() => validateKvConnector(value)).toThrow(message);
    expect(() => validateKvConnector(value)).toThrow(
      expect.objectContaining({ code: 'INVALID_CONNECTOR' }),
    );
  });
});
