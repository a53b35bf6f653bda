// `@kvasir/kv-allocator/policies`: the eviction-policy plug-in surface on its own.

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
