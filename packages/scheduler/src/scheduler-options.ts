// The scheduler's options, checked once and resolved to their defaults.
import type { KvCacheManager } from '@kvasir/kv-allocator';
import { SchedulerError } from './errors.js';
import { HostSlotPool } from './host-slots.js';
import {
  fcfsPolicy,
  lowestPriorityLatestArrival,
  type PreemptionPolicy,
  type QueuePolicy,
  validatePreemptionPolicy,
  validateQueuePolicy,
} from './policies.js';
import type { PreemptionMode, SchedulerEvent } from './types.js';

/** Options of `Scheduler`. */
export interface SchedulerOptions {
  /** The paged KV allocator the scheduler takes blocks from (it owns the sequences in it). */
  readonly kvCache: KvCacheManager;
  /** Longest sequence (prompt + generated) the model accepts. */
  readonly maxModelLen: number;
  /** Sequences (rows) per step. Default 256. */
  readonly maxNumSeqs?: number;
  /** Tokens per step (the token budget). Default 2048. */
  readonly maxNumBatchedTokens?: number;
  /** Split long prompts into chunks over several steps. Default true. */
  readonly enableChunkedPrefill?: boolean;
  /**
   * Most prompt tokens one sequence may take in a step, so one long prompt cannot take the
   * whole budget. Default `maxNumBatchedTokens` (no cap).
   */
  readonly longPrefillTokenThreshold?: number;
  /** Look up cached prefixes on admission. Default: the allocator's `enablePrefixCaching`. */
  readonly enablePrefixCaching?: boolean;
  /** What preemption does. Default 'recompute'. */
  readonly preemptionMode?: PreemptionMode;
  /** Host slots (one block each) available to swap preemption. Default 0. */
  readonly hostSwapBlocks?: number;
  /** Order of the waiting queue. Default FCFS. */
  readonly queuePolicy?: QueuePolicy;
  /** Victim choice. Default lowest priority, then latest arrival. */
  readonly preemptionPolicy?: PreemptionPolicy;
  /** End-of-sequence token for requests that do not set their own. */
  readonly eosTokenId?: number;
  /**
   * Fraction of the cache kept free when admitting new requests, so running ones can grow a
   * while before anything must be preempted (vLLM v0's watermark). Default 0.01.
   */
  readonly admissionWatermark?: number;
  /** Time source for arrival, aging and latency. Default: the step counter. */
  readonly clock?: () => number;
  /** Called synchronously for every event. */
  readonly onEvent?: (event: SchedulerEvent) => void;
}

/** `SchedulerOptions` with every default applied and every value checked. */
export interface ResolvedSchedulerOptions {
  readonly kvCache: KvCacheManager;
  readonly maxModelLen: number;
  readonly maxNumSeqs: number;
  readonly maxNumBatchedTokens: number;
  readonly enableChunkedPrefill: boolean;
  readonly longPrefillTokenThreshold: number;
  /** On only when both the option and the allocator allow it. */
  readonly enablePrefixCaching: boolean;
  readonly preemptionMode: PreemptionMode;
  /** `admissionWatermark` in blocks. */
  readonly watermarkBlocks: number;
  /** The `hostSwapBlocks` slots. */
  readonly hostSlots: HostSlotPool;
  readonly queuePolicy: QueuePolicy;
  readonly preemptionPolicy: PreemptionPolicy;
  readonly eosTokenId: number | undefined;
  readonly clock: (() => number) | undefined;
  readonly onEvent: ((event: SchedulerEvent) => void) | undefined;
}

/**
 * Checks the options in declaration order and applies the defaults.
 * @throws {SchedulerError} INVALID_CONFIG naming the first bad option; INVALID_POLICY for an
 *   unversioned or malformed policy.
 */
export function resolveSchedulerOptions(options: SchedulerOptions): ResolvedSchedulerOptions {
  const o = options;
  const kv = o?.kvCache;
  if (!kv || typeof kv.allocateSlots !== 'function' || typeof kv.blockTable !== 'function') {
    throw new SchedulerError('INVALID_CONFIG', 'kvCache must be a KvCacheManager');
  }
  const int = (name: string, v: number, min: number): number => {
    if (!Number.isInteger(v) || v < min) {
      throw new SchedulerError(
        'INVALID_CONFIG',
        `${name} must be an integer ≥ ${min}, got ${String(v)}`,
        { details: { [name]: v } },
      );
    }
    return v;
  };
  const maxModelLen = int('maxModelLen', o.maxModelLen, 1);
  const maxNumSeqs = int('maxNumSeqs', o.maxNumSeqs ?? 256, 1);
  const maxNumBatchedTokens = int('maxNumBatchedTokens', o.maxNumBatchedTokens ?? 2048, 1);
  const enableChunkedPrefill = o.enableChunkedPrefill ?? true;
  const longPrefillTokenThreshold = int(
    'longPrefillTokenThreshold',
    o.longPrefillTokenThreshold ?? maxNumBatchedTokens,
    1,
  );
  if (!enableChunkedPrefill && maxNumBatchedTokens < maxModelLen) {
    throw new SchedulerError(
      'INVALID_CONFIG',
      `without chunked prefill maxNumBatchedTokens (${maxNumBatchedTokens}) must be ≥ maxModelLen (${maxModelLen}), or long prompts could never run`,
    );
  }
  const enablePrefixCaching = (o.enablePrefixCaching ?? true) && kv.enablePrefixCaching;
  const preemptionMode = o.preemptionMode ?? 'recompute';
  if (preemptionMode !== 'recompute' && preemptionMode !== 'swap') {
    throw new SchedulerError('INVALID_CONFIG', `unknown preemptionMode ${String(preemptionMode)}`);
  }
  if (preemptionMode === 'swap' && o.kvCache.numGroups > 1) {
    // Swap moves one block table's blocks; a grouped cache has one table per group.
    throw new SchedulerError(
      'INVALID_CONFIG',
      `preemptionMode 'swap' needs a KV cache of one group (this one has ${o.kvCache.numGroups}: sliding-window layers); use 'recompute'`,
    );
  }
  const wm = o.admissionWatermark ?? 0.01;
  if (!(wm >= 0 && wm < 1)) {
    throw new SchedulerError('INVALID_CONFIG', `admissionWatermark must be in [0, 1), got ${wm}`);
  }
  const hostSlots = new HostSlotPool(o.hostSwapBlocks ?? 0);
  const queuePolicy = validateQueuePolicy(o.queuePolicy ?? fcfsPolicy());
  const preemptionPolicy = validatePreemptionPolicy(
    o.preemptionPolicy ?? lowestPriorityLatestArrival(),
  );
  if (o.eosTokenId !== undefined) int('eosTokenId', o.eosTokenId, 0);
  return {
    kvCache: kv,
    maxModelLen,
    maxNumSeqs,
    maxNumBatchedTokens,
    enableChunkedPrefill,
    longPrefillTokenThreshold,
    enablePrefixCaching,
    preemptionMode,
    watermarkBlocks: Math.floor(wm * kv.numBlocks),
    hostSlots,
    queuePolicy,
    preemptionPolicy,
    eosTokenId: o.eosTokenId,
    clock: o.clock,
    onEvent: o.onEvent,
  };
}
