// `@kvasir/kv-allocator/policies`: the eviction-policy plug-in surface on its own.
export { FifoPolicy } from './policies/fifo-policy';
export { LfuPolicy, type LfuPolicyOptions } from './policies/lfu-policy';
export { LruPolicy } from './policies/lru-policy';
export {
  createEvictionPolicy,
  type EvictionPolicyName,
  validateEvictionPolicy,
} from './policies/registry';
export type { EvictionPolicy } from './types';
