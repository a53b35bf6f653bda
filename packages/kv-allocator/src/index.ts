export { BlockPool, type BlockPoolEvent, type BlockPoolOptions } from './block-pool.js';
export type { BlockPoolView } from './block-pool-view.js';
export { KvAllocatorError, type KvAllocatorErrorCode } from './errors.js';
export type { ExternalBlocks } from './external-blocks.js';
export { hashBlock, rootHash } from './hash.js';
export { KvCacheManager } from './kv-cache-manager.js';
export { blocksThatFit, kvBytesPerBlock, kvBytesPerToken } from './layout.js';
// The eviction-policy plug-in surface, also published alone as `@kvasir/kv-allocator/policies`.
export * from './policies.js';
export type {
  AllocateOptions,
  AllocateResult,
  BlockCopy,
  BlockHash,
  BlockId,
  CachedPrefix,
  ExtraKeys,
  FreeOptions,
  KvCacheManagerOptions,
  KvCacheStats,
  KvLayout,
  SeqId,
} from './types.js';
