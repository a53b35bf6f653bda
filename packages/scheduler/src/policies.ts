// The scheduler's plug-in contracts: waiting-queue order and preemption victims.
export {
  definePreemptionPolicy,
  lowestPriorityLatestArrival,
  PREEMPTION_POLICY_SPECIFICATION_VERSION,
  type PreemptionPolicy,
  type RunningRequest,
  validatePreemptionPolicy,
} from './policies/preemption-policy';
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
} from './policies/queue-policy';
