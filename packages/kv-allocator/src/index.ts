export { BlockPool, type BlockPoolOptions } from './block-pool.js';
export { KvAllocatorError, type KvAllocatorErrorCode } from './errors.js';
export { hashBlock, rootHash } from './hash.js';
export {
  type AllocateOptions,
  type BlockPoolView,
  type ExternalBlocks,
  type FreeOptions,
  KvCacheManager,
  type KvCacheManagerOptions,
} from './kv-cache-manager.js';
export { blocksThatFit, kvBytesPerBlock, kvBytesPerToken } from './layout.js';
// The eviction-policy plug-in surface, also published alone as `@kvasir/kv-allocator/policies`.
export * from './policies.js';
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
} from './types.js';
