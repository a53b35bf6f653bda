export { BlockPool, type BlockPoolOptions } from './block-pool';
export { KvAllocatorError, type KvAllocatorErrorCode } from './errors';
export { hashBlock, rootHash } from './hash';
export {
  type AllocateOptions,
  type BlockPoolView,
  type ExternalBlocks,
  type FreeOptions,
  KvCacheManager,
  type KvCacheManagerOptions,
} from './kv-cache-manager';
export { blocksThatFit, kvBytesPerBlock, kvBytesPerToken } from './layout';
// The eviction-policy plug-in surface, also published alone as `@kvasir/kv-allocator/policies`.
export * from './policies';
export type {
  AllocateResult,
  BlockCopy,
  BlockHash,
  BlockId,
  CachedPrefix,
  ExtraKeys,
  KvCacheStats,
  KvLayout,
  SeqId,
} from './types';
