export { SchedulerError, type SchedulerErrorCode } from './errors';
export { HostSlotPool } from './host-slots';
export {
  definePreemptionPolicy,
  defineQueuePolicy,
  fcfsPolicy,
  type LongestPrefixMatchOptions,
  longestPrefixMatchPolicy,
  lowestPriorityLatestArrival,
  PREEMPTION_POLICY_SPECIFICATION_VERSION,
  type PreemptionPolicy,
  type PriorityPolicyOptions,
  priorityPolicy,
  QUEUE_POLICY_SPECIFICATION_VERSION,
  type QueueContext,
  type QueuedRequest,
  type QueuePolicy,
  type QueuePolicyName,
  queuePolicies,
  type RunningRequest,
  validatePreemptionPolicy,
  validateQueuePolicy,
} from './policies';
export { Scheduler, type SchedulerOptions } from './scheduler';
export type {
  BatchPlan,
  FinishReason,
  PlanRow,
  PreemptionMode,
  RequestOutput,
  SchedulerEvent,
  SchedulerMetrics,
  SchedulerRequest,
  SequenceOutput,
  StepResult,
  SwapTransfer,
} from './types';
export { type RequestLimits, validateRequest } from './validate';
