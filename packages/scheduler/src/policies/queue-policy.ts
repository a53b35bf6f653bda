import { SchedulerError } from '../errors.js';

/** The version of the {@link QueuePolicy} contract this package implements. */
export const QUEUE_POLICY_SPECIFICATION_VERSION = 'v1';

/** What a queue policy sees of a waiting request. */
export interface QueuedRequest {
  readonly requestId: string;
  readonly priority: number;
  readonly arrivalTime: number;
  /** Order of `add` calls; breaks ties. */
  readonly arrivalIndex: number;
  readonly numPromptTokens: number;
  /** Times this request was preempted (it waits to resume). */
  readonly numPreemptions: number;
}

/** Step context handed to `QueuePolicy.rank`. */
export interface QueueContext {
  /** Scheduler clock now. */
  readonly now: number;
  /** Requests in the waiting queue. */
  readonly queueLength: number;
  /** Prompt tokens of `req` the prefix cache holds now (hashes the prompt: call only if needed). */
  cachedPrefixTokens(req: QueuedRequest): number;
}

/**
 * Orders the waiting queue (contract `v1`). Requests are admitted in increasing `rank`; equal
 * ranks keep arrival order. The scheduler never skips a request it cannot admit (no
 * head-of-line bypass), so a policy fully decides who goes next. Make one with
 * {@link defineQueuePolicy}.
 */
export interface QueuePolicy {
  /** The contract version the policy was written against; `'v1'`. */
  readonly specificationVersion: typeof QUEUE_POLICY_SPECIFICATION_VERSION;
  /** Name for logs and `--queue-policy`. */
  readonly name: string;
  rank(req: QueuedRequest, ctx: QueueContext): number;
}

/**
 * Makes a {@link QueuePolicy} from its name and `rank`, stamped with the contract version.
 * @throws {SchedulerError} INVALID_POLICY when `rank` is not a function or the name is empty.
 */
export function defineQueuePolicy(hooks: Omit<QueuePolicy, 'specificationVersion'>): QueuePolicy {
  return validateQueuePolicy({
    ...hooks,
    specificationVersion: QUEUE_POLICY_SPECIFICATION_VERSION,
  });
}

/**
 * Checks that `value` is a {@link QueuePolicy} of a version this package implements.
 * @throws {SchedulerError} INVALID_POLICY naming what is missing or the unsupported version.
 */
export function validateQueuePolicy(value: unknown): QueuePolicy {
  checkContract(value, 'queue policy', QUEUE_POLICY_SPECIFICATION_VERSION, 'defineQueuePolicy', [
    'rank',
  ]);
  return value as QueuePolicy;
}

/**
 * Shared check of the scheduler's plug-in contracts: an object, the right version, a name, the
 * hooks.
 * @throws {SchedulerError} INVALID_POLICY.
 */
export function checkContract(
  value: unknown,
  what: string,
  version: string,
  helper: string,
  hooks: readonly string[],
): void {
  const bad = (message: string): never => {
    throw new SchedulerError('INVALID_POLICY', message);
  };
  if (typeof value !== 'object' || value === null) bad(`a ${what} must be an object`);
  const v = value as Record<string, unknown>;
  if (v.specificationVersion !== version) {
    bad(
      v.specificationVersion === undefined
        ? `${what} has no specificationVersion: make it with ${helper}() (or set specificationVersion: '${version}')`
        : `${what} specificationVersion ${JSON.stringify(v.specificationVersion)} is not supported (this version implements '${version}')`,
    );
  }
  if (typeof v.name !== 'string' || v.name === '') bad(`${what} needs a non-empty name`);
  for (const hook of hooks) {
    if (typeof v[hook] !== 'function')
      bad(`${what} ${String(v.name)} is missing the function "${hook}"`);
  }
}

/** First come, first served (the default): by arrival time, then `add` order. */
export function fcfsPolicy(): QueuePolicy {
  return defineQueuePolicy({ name: 'fcfs', rank: (req) => req.arrivalTime });
}

/** Options of `priorityPolicy`. */
export interface PriorityPolicyOptions {
  /**
   * Priority units a request gains per clock unit of waiting, so a low-priority request
   * eventually overtakes newer high-priority ones (no starvation). Default 0.01; 0 disables aging.
   */
  readonly agingRate?: number;
}

/**
 * Lowest `priority` value first, aged by waiting time: rank = priority − agingRate × waited.
 * @throws {SchedulerError} INVALID_POLICY for a negative or non-finite aging rate.
 */
export function priorityPolicy(options: PriorityPolicyOptions = {}): QueuePolicy {
  const agingRate = options.agingRate ?? 0.01;
  if (!Number.isFinite(agingRate) || agingRate < 0) {
    throw new SchedulerError(
      'INVALID_POLICY',
      `agingRate must be finite and ≥ 0, got ${agingRate}`,
    );
  }
  return defineQueuePolicy({
    name: 'priority',
    rank: (req, ctx) => req.priority - agingRate * Math.max(0, ctx.now - req.arrivalTime),
  });
}

/** Options of `longestPrefixMatchPolicy`. */
export interface LongestPrefixMatchOptions {
  /** A request waiting longer than this (clock units) goes first, oldest first. Default 100. */
  readonly maxWait?: number;
  /**
   * Above this queue length the policy behaves as FCFS: hashing every prompt each step costs
   * too much, and a long queue is where LPM starves cold requests (SGLang #31954). Default 128.
   */
  readonly fcfsQueueLength?: number;
}

/**
 * Longest cached prefix first (SGLang's cache-aware scheduling), so requests sharing a hot
 * prefix run while it is cached; with a starvation guard (`maxWait`) and an FCFS fallback for
 * long queues.
 * @throws {SchedulerError} INVALID_POLICY for a negative limit.
 */
export function longestPrefixMatchPolicy(options: LongestPrefixMatchOptions = {}): QueuePolicy {
  const maxWait = options.maxWait ?? 100;
  const fcfsQueueLength = options.fcfsQueueLength ?? 128;
  if (!(maxWait >= 0) || !(fcfsQueueLength >= 0)) {
    throw new SchedulerError('INVALID_POLICY', 'maxWait and fcfsQueueLength must be ≥ 0');
  }
  // Starved and FCFS ranks sit far below any LPM rank so they always go first.
  const STARVED = -1e15;
  return defineQueuePolicy({
    name: 'lpm',
    rank: (req, ctx) => {
      if (ctx.queueLength > fcfsQueueLength) return req.arrivalTime;
      if (ctx.now - req.arrivalTime > maxWait) return STARVED + req.arrivalTime;
      return -ctx.cachedPrefixTokens(req);
    },
  });
}

/** Names of the built-in queue policies. */
export type QueuePolicyName = 'fcfs' | 'priority' | 'lpm';

/** The built-in queue policies by name, each a factory with default options. */
export const queuePolicies: Readonly<Record<QueuePolicyName, () => QueuePolicy>> = {
  fcfs: fcfsPolicy,
  priority: () => priorityPolicy(),
  lpm: () => longestPrefixMatchPolicy(),
};
