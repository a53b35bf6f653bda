export { engineChainRoot, promptBlockHashes } from './block-hashes.js';
export { RouterError, type RouterErrorCode } from './errors.js';
export {
  DEFAULT_MEDIUM,
  decodeKvEventBatch,
  type HashKey,
  hashKey,
  type KvEvent,
  type KvEventBatch,
  type Medium,
} from './kv-event-decoder.js';
export {
  KvEventSubscriber,
  type KvEventSubscriberOptions,
  type KvEventSubscriberStats,
} from './kv-event-subscriber.js';
export {
  type BuiltinRoutingName,
  builtinRoutingPolicy,
  type CacheAwareOptions,
  cacheAwarePolicy,
  type KvAwareOptions,
  kvAwarePolicy,
  leastLoadedPolicy,
  roundRobinPolicy,
} from './policies.js';
export {
  DEFAULT_TIER_WEIGHTS,
  PrefixIndex,
  type PrefixIndexOptions,
  type PrefixMatch,
  type TierWeights,
} from './prefix-index.js';
export { type PromptMessage, type PromptTokenizer, promptOf, type RoutedPrompt } from './prompt.js';
export { parseReplicaSpec, type ReplicaSpec } from './replica.js';
export {
  KvRouter,
  type KvRouterOptions,
  type ReplicaState,
  type RouterCounters,
} from './router.js';
export {
  defineRoutingPolicy,
  type ReplicaCandidate,
  ROUTING_POLICY_SPECIFICATION_VERSION,
  type RoutingPolicy,
  type RoutingPolicyHooks,
  type RoutingRequest,
  validateRoutingPolicy,
} from './routing-policy.js';
