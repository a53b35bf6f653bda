// The scheduler's plug-in contracts: waiting-queue order, preemption victims and token-level KV
// compression.

export {
  type H2oPolicyOptions,
  h2oPolicy,
  KV_COMPRESSION_PARAMETERS,
  type KvCompressionPolicyName,
  kvCompressionPolicies,
  type SinksPolicyOptions,
  type SnapkvPolicyOptions,
  sinksPolicy,
  snapkvPolicy,
  type WindowPolicyOptions,
  windowPolicy,
} from './kv-compression/builtins.js';
export {
  checkBudget as checkKvCompressionBudget,
  type KvCompressionParseOptions,
  type KvCompressionSpec,
  type KvPositions,
  kvCompressionFromJson,
  parseKvCompression,
} from './kv-compression/parse.js';
export {
  defineKvCompressionPolicy,
  KV_COMPRESSION_POLICY_SPECIFICATION_VERSION,
  type KvCompressionPolicy,
  type KvCompressionView,
  validateKvCompressionPolicy,
} from './kv-compression/policy.js';
export {
  definePreemptionPolicy,
  lowestPriorityLatestArrival,
  PREEMPTION_POLICY_SPECIFICATION_VERSION,
  type PreemptionPolicy,
  type RunningRequest,
  validatePreemptionPolicy,
} from './policies/preemption-policy.js';
export {
  defineQueuePolicy,
  fcfsPolicy,
  type LongestPrefixMatchOptions,
  longestPrefixMatchPolicy,
  type PriorityPolicyOptions,
  priorityPolicy,
  QUEUE_POLICY_SPECIFICATION_VERSION,
  type QueueContext,
  type QueuedRequest,
  type QueuePolicy,
  type QueuePolicyName,
  queuePolicies,
  validateQueuePolicy,
} from './policies/queue-policy.js';
