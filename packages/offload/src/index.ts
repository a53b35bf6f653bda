export type { ChecksumThreads } from './checksum-pool';
export { DiskStore, type DiskStoreOptions } from './disk-store';
export { OffloadError, type OffloadErrorCode } from './errors';
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
} from './frame';
export { HostMemoryStore, type HostMemoryStoreOptions } from './host-memory-store';
export { isBlockHash, KV_FORMAT_VERSION, type KvNamespaceSpec, kvNamespace } from './keys';
export {
  checkRedisUrl,
  RedisStore,
  type RedisStoreOptions,
  type RedisStoreStats,
} from './redis-store';
export { isStagingBuffer, stagingBuffers } from './staging';
export {
  type FetchOptions,
  type FetchResult,
  TieredStore,
  type TieredStoreOptions,
  type TieredStoreStats,
  type WriteMode,
} from './tiered-store';
export type { TransferOutcome } from './transfer-queue';
export type {
  EvictionListener,
  EvictionSource,
  KvBlockEntry,
  KvBlockStore,
  OffloadStats,
} from './types';
export { xxh64 } from './xxh64';
