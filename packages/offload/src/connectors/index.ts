// `@kvasir/offload/connectors`: the KV connector contract (how an engine moves blocks between its
// device cache and storage outside it) and the two connectors built on this package's stores.
export {
  defineKvConnector,
  KV_CONNECTOR_SPECIFICATION_VERSION,
  type KvBlockIo,
  type KvConnector,
  type KvConnectorContext,
  type KvConnectorFactory,
  type KvConnectorHooks,
  type KvConnectorRequest,
  type KvConnectorRow,
  type KvConnectorStep,
  type KvSwapTransfer,
  validateKvConnector,
} from './kv-connector.js';
export {
  NO_PREFIX_OFFLOAD,
  PrefixOffloadConnector,
  type PrefixOffloadContext,
  type PrefixOffloadStats,
} from './prefix-offload-connector.js';
export { SwapConnector, type SwapConnectorOptions } from './swap-connector.js';
