import type { BatchPlan } from '@kvasir/scheduler';

/**
 * Moves KV blocks between the runner's cache and storage outside it (swap to host, prefix
 * blocks to and from disk and Redis). The engine calls each connector at fixed points of a
 * request and of a step, as vLLM's KV connector is called by its scheduler and workers:
 *
 * - `onAdmit`, before a request is queued: bring in what the tiers hold of its prompt;
 * - `betweenSteps`, while no plan runs: work that changes the allocator's state;
 * - `beforeForward`, after `schedule()`: the block moves the plan asks for;
 * - `afterForward`, once the forward pass is queued: keep what the step computed.
 *
 * A connector never throws into a request for a storage failure (that is a miss and a
 * recompute) except in `beforeForward`, where a block it cannot move fails the step.
 */
export interface KvConnector {
  /** Looks the prompt up outside the cache; resolves once what was found is in the cache. */
  onAdmit?(promptTokens: readonly number[]): Promise<void>;
  /** True while `betweenSteps` has work: the engine loop stays awake for it. */
  readonly hasPendingWork?: boolean;
  /** Runs between steps, when no plan is scheduled or running. */
  betweenSteps?(): Promise<void>;
  /**
   * Performs the plan's block moves before its forward pass. Returns the requests whose KV could
   * not be restored (they end with an error, never wrong text).
   */
  beforeForward?(plan: BatchPlan): Promise<ReadonlySet<string> | undefined>;
  /** Sees the plan after its forward pass was queued (not awaited). */
  afterForward?(plan: BatchPlan): void;
  /** Drops pending work and waits for writes in flight. */
  close(): Promise<void>;
}
