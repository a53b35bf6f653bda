export { SchedulerError, type SchedulerErrorCode } from './errors.js';
export { HostSlotPool } from './host-slots.js';
// The policy contracts and built-ins (src/policies.ts names each export).
export * from './policies.js';
export { Scheduler } from './scheduler.js';
export type { SchedulerOptions } from './scheduler-options.js';
export type {
  BatchPlan,
  FinishReason,
  KeyShift,
  KvCompressionMetrics,
  LiveRequestSequences,
  PlanRow,
  PreemptionMode,
  RequestOutput,
  SchedulerEvent,
  SchedulerMetrics,
  SchedulerRequest,
  SequenceOutput,
  StepResult,
  SwapTransfer,
} from './types.js';
export { type RequestLimits, validateRequest } from './validate.js';
