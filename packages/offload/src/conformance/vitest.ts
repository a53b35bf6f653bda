import { describe, it } from 'vitest';
import type { ConformanceCheck } from './check.js';
import { type KvBlockStoreConformanceOptions, kvBlockStoreChecks } from './kv-block-store-suite.js';
import { type KvConnectorConformanceOptions, kvConnectorChecks } from './kv-connector-suite.js';

function register(title: string, checks: readonly ConformanceCheck[]): void {
  describe(title, () => {
    for (const c of checks) it(c.name, c.run);
  });
}

/**
 * Registers the `KvBlockStore` conformance suite with vitest, one test per check.
 *
 * @example
 * ```ts
 * import { HostMemoryStore } from '@kvasir/offload';
 * import { runKvBlockStoreConformance } from '@kvasir/offload/conformance';
 *
 * runKvBlockStoreConformance({
 *   name: 'HostMemoryStore',
 *   open: async (namespace) => new HostMemoryStore({ namespace, maxBytes: 1 << 20 }),
 * });
 * ```
 */
export function runKvBlockStoreConformance(options: KvBlockStoreConformanceOptions): void {
  register(`KvBlockStore conformance: ${options.name}`, kvBlockStoreChecks(options));
}

/**
 * Registers the KV connector conformance suite with vitest, one test per check.
 *
 * @example
 * ```ts
 * import { HostMemoryStore, TieredStore } from '@kvasir/offload';
 * import { PrefixOffloadConnector } from '@kvasir/offload/connectors';
 * import { CONFORMANCE_NAMESPACE, runKvConnectorConformance } from '@kvasir/offload/conformance';
 *
 * runKvConnectorConformance({
 *   name: 'PrefixOffloadConnector',
 *   backing: async () =>
 *     new TieredStore({ tiers: [new HostMemoryStore({ namespace: CONFORMANCE_NAMESPACE, maxBytes: 1 << 20 })] }),
 *   create: (context, store) => new PrefixOffloadConnector({ ...context, store }),
 *   closeBacking: (store) => store.close(),
 *   sharesPrefixes: true,
 * });
 * ```
 */
export function runKvConnectorConformance<B>(options: KvConnectorConformanceOptions<B>): void {
  register(`KV connector conformance: ${options.name}`, kvConnectorChecks(options));
}
