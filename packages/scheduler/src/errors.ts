import { KvasirError } from '@kvasir/errors';

/** Stable reasons a `SchedulerError` is thrown. */
export type SchedulerErrorCode =
  | 'INVALID_CONFIG'
  | 'INVALID_REQUEST'
  | 'DUPLICATE_REQUEST'
  | 'INVALID_RESULT'
  | 'INVALID_POLICY'
  | 'INVALID_ARGUMENT';

/**
 * Thrown by @kvasir/scheduler for bad configuration, requests or step results. The scheduler's
 * state is unchanged when it is thrown.
 */
export class SchedulerError extends KvasirError<SchedulerErrorCode> {}
