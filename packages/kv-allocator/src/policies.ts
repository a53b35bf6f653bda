// `@kvasir/kv-allocator/policies`: the eviction-policy plug-in surface on its own.

export {
  defineEvictionPolicy,
  EVICTION_POLICY_SPECIFICATION_VERSION,
  type EvictionPolicy,
  type EvictionPolicyHooks,
  validateEvictionPolicy,
} from './policies/eviction-policy.js';
export { FifoPolicy } from './policies/fifo-policy.js';
export { LfuPolicy, type LfuPolicyOptions } from './policies/lfu-policy.js';
export { LruPolicy } from './policies/lru-policy.js';
export {
  createEvictionPolicy,
  type EvictionPolicyName,
  evictionPolicies,
  isEvictionPolicyName,
} from './policies/registry.js';
