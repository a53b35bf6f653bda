export { SchedulerError, type SchedulerErrorCode } from './errors';
export { HostSlotPool } from './host-slots';
export {
  fcfsPolicy,
  type LongestPrefixMatchOptions,
  longestPrefixMatchPolicy,
  lowestPriorityLatestArrival,
  type PreemptionPolicy,
  type PriorityPolicyOptions,
  priorityPolicy,
  type QueueContext,
  type QueuedRequest,
  type QueuePolicy,
  type RunningRequest,
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
