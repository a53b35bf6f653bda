export { BlockPool, type BlockPoolEvent, type BlockPoolOptions } from './block-pool.js';
export type { BlockPoolView } from './block-pool-view.js';
export { KvAllocatorError, type KvAllocatorErrorCode } from './errors.js';
export type { ExternalBlocks } from './external-blocks.js';
export { type KvGroupLayout, kvGroupLayout } from './group-layout.js';
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
  CachedPrefixGroup,
  ExtraKeys,
  FreeOptions,
  KvCacheManagerOptions,
  KvCacheStats,
  KvGroupSpec,
  KvGroupStats,
  KvLayout,
  SeqId,
} from './types.js';
