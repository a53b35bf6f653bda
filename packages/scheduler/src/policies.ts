import { SchedulerError } from './errors';

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
 * Orders the waiting queue. Requests are admitted in increasing `rank`; equal ranks keep
 * arrival order. The scheduler never skips a request it cannot admit (no head-of-line bypass),
 * so a policy fully decides who goes next. A plain object with `rank` is a valid policy.
 */
export interface QueuePolicy {
  readonly name?: string;
  rank(req: QueuedRequest, ctx: QueueContext): number;
}

/** What a preemption policy sees of a running request. */
export interface RunningRequest {
  readonly requestId: string;
  readonly priority: number;
  readonly arrivalTime: number;
  readonly arrivalIndex: number;
  /** Tokens held in the KV cache by its sequences. */
  readonly numComputedTokens: number;
  readonly numSeqs: number;
  readonly numPreemptions: number;
}

/**
 * Chooses which running request to preempt when blocks run out. `candidates` are running
 * requests not yet scheduled in this step (never empty); return an index into it.
 */
export interface PreemptionPolicy {
  readonly name?: string;
  chooseVictim(candidates: readonly RunningRequest[]): number;
}

/** First come, first served (the default): by arrival time, then `add` order. */
export function fcfsPolicy(): QueuePolicy {
  return { name: 'fcfs', rank: (req) => req.arrivalTime };
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
  return {
    name: 'priority',
    rank: (req, ctx) => req.priority - agingRate * Math.max(0, ctx.now - req.arrivalTime),
  };
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
  return {
    name: 'lpm',
    rank: (req, ctx) => {
      if (ctx.queueLength > fcfsQueueLength) return req.arrivalTime;
      if (ctx.now - req.arrivalTime > maxWait) return STARVED + req.arrivalTime;
      return -ctx.cachedPrefixTokens(req);
    },
  };
}

/**
 * The default preemption policy: the lowest priority (largest value) first, then the latest
 * arrival (vLLM's rule), so the oldest important work keeps its blocks.
 */
export function lowestPriorityLatestArrival(): PreemptionPolicy {
  return {
    name: 'lowest-priority-latest-arrival',
    chooseVictim(candidates) {
      let best = 0;
      for (let i = 1; i < candidates.length; i++) {
        const c = candidates[i]!;
        const b = candidates[best]!;
        if (
          c.priority > b.priority ||
          (c.priority === b.priority &&
            (c.arrivalTime > b.arrivalTime ||
              (c.arrivalTime === b.arrivalTime && c.arrivalIndex > b.arrivalIndex)))
        ) {
          best = i;
        }
      }
      return best;
    },
  };
}
