export type { ChecksumThreads } from './checksum-pool.js';
export { DiskStore } from './disk-store.js';
export type { DiskStoreOptions } from './disk-store-options.js';
export { OffloadError, type OffloadErrorCode } from './errors.js';
export {
  type DecodedFrame,
  decodeFrame,
  decodeFrameHeader,
  encodeFrame,
  encodeFrameHeader,
  FRAME_HEADER_BYTES,
  FRAME_MAGIC,
  FRAME_VERSION,
  type FrameFault,
  type FrameHeader,
  payloadChecksum,
} from './frame.js';
export { HostMemoryStore, type HostMemoryStoreOptions } from './host-memory-store.js';
export {
  isBlockHash,
  KV_FORMAT_VERSION,
  type KvNamespaceSpec,
  kvNamespace,
  kvNamespaceAsync,
} from './keys.js';
export {
  checkRedisUrl,
  parseRedisClusterUrl,
  type RedisClusterUrl,
  RedisStore,
  type RedisStoreOptions,
  type RedisStoreStats,
} from './redis-store.js';
export { isStagingBuffer, stagingBuffers } from './staging.js';
export {
  type FetchOptions,
  type FetchResult,
  TieredStore,
  type TieredStoreOptions,
  type TieredStoreStats,
  type WriteMode,
} from './tiered-store.js';
export type { TransferOutcome } from './transfer-queue.js';
export type * from './types.js';
export { xxh64 } from './xxh64.js';
