export { SchedulerError, type SchedulerErrorCode } from './errors';
export { HostSlotPool } from './host-slots';
// The policy contracts and built-ins (src/policies.ts names each export).
export * from './policies';
export { Scheduler } from './scheduler';
export type { SchedulerOptions } from './scheduler-options';
export type {
  BatchPlan,
  FinishReason,
  KeyShift,
  KvCompressionMetrics,
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
