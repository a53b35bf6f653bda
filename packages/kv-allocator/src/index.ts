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
export {
  defineEvictionPolicy,
  EVICTION_POLICY_SPECIFICATION_VERSION,
  type EvictionPolicy,
  type EvictionPolicyHooks,
  validateEvictionPolicy,
} from './policies/eviction-policy';
export { FifoPolicy } from './policies/fifo-policy';
export { LfuPolicy, type LfuPolicyOptions } from './policies/lfu-policy';
export { LruPolicy } from './policies/lru-policy';
export {
  createEvictionPolicy,
  type EvictionPolicyName,
  evictionPolicies,
  isEvictionPolicyName,
} from './policies/registry';
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
