// What runs in any JavaScript runtime, Node, browsers and workers (no node: modules): the tiered
// store, the frame every stored block is written in (header with namespace, key, length and
// XXH64), the namespace fingerprint through Web Crypto, and the bookkeeping the host and disk
// stores share, for stores written outside this package (@kvasir/web's OPFS tier).
export { BudgetedIndex } from './budgeted-index.js';
export { OffloadError, type OffloadErrorCode } from './errors.js';
export {
  checkFrameHeader,
  type DecodedFrame,
  decodeFrame,
  encodeFrame,
  encodeFrameHeader,
  FRAME_HEADER_BYTES,
  type FrameFault,
  payloadMatches,
} from './frame.js';
export {
  isBlockHash,
  KV_FORMAT_VERSION,
  type KvNamespaceSpec,
  kvNamespaceAsync,
} from './keys.js';
export { Counters } from './stats.js';
export {
  type FetchOptions,
  type FetchResult,
  TieredStore,
  type TieredStoreOptions,
  type WriteMode,
} from './tiered-store.js';
export type * from './types.js';
export { checkBudget, checkEntries, checkKeys, checkOpen } from './validate.js';
export { xxh64 } from './xxh64.js';
