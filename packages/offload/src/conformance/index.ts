// `@kvasir/offload/conformance`: the suites every KvBlockStore and every KV connector in the
// repository runs, published for third-party stores and connectors. The checks are plain async
// functions; the `run…` helpers register them with vitest (an optional peer dependency).
export type { ConformanceCheck } from './check.js';
export {
  CONFORMANCE_NAMESPACE,
  type KvBlockStoreConformanceOptions,
  kvBlockStoreChecks,
} from './kv-block-store-suite.js';
export { type KvConnectorConformanceOptions, kvConnectorChecks } from './kv-connector-suite.js';
export { runKvBlockStoreConformance, runKvConnectorConformance } from './vitest.js';
