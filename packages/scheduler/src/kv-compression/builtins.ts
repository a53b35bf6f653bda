// The built-in compression policies. Parameters are in tokens and rounded up to whole blocks:
// the cache is paged, so a block is the unit a sequence can drop.
import { SchedulerError } from '../errors.js';
import {
  defineKvCompressionPolicy,
  type KvCompressionPolicy,
  type KvCompressionView,
} from './policy.js';

const KEEP_ALL: readonly number[] = Object.freeze([]);

function tokens(policy: string, name: string, value: unknown, min = 1): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min) {
    throw new SchedulerError(
      'INVALID_ARGUMENT',
      `${policy}: ${name} must be an integer ≥ ${min} (tokens), got ${String(value)}`,
      { details: { policy, parameter: name, value } },
    );
  }
  return value;
}

const blocksOf = (tokenCount: number, blockSize: number) => Math.ceil(tokenCount / blockSize);

/** Indices [from, to) as a list. */
function span(from: number, to: number): number[] {
  const out: number[] = [];
  for (let i = from; i < to; i++) out.push(i);
  return out;
}

/**
 * Of `candidates` (ascending logical indices), the `keep` with the largest scores; ties keep
 * the more recent block. Returns the others, ascending: the ones to drop.
 */
function dropAllButTop(candidates: number[], scores: Float32Array, keep: number): number[] {
  if (keep >= candidates.length) return [];
  const ranked = [...candidates].sort((a, b) => scores[b]! - scores[a]! || b - a);
  const kept = new Set(ranked.slice(0, Math.max(0, keep)));
  return candidates.filter((i) => !kept.has(i));
}

/** Options of {@link windowPolicy}. */
export interface WindowPolicyOptions {
  /** Most recent tokens kept (rounded up to whole blocks, the filling last block included). */
  readonly window: number;
}

/**
 * `window`: only the most recent `ceil(window / blockSize)` blocks. The baseline that breaks a
 * model once the first tokens (the attention sinks) leave the cache.
 * @throws {SchedulerError} INVALID_ARGUMENT for a window that is not a positive integer.
 */
export function windowPolicy(options: WindowPolicyOptions): KvCompressionPolicy {
  const window = tokens('window', 'window', options?.window);
  return defineKvCompressionPolicy({
    name: 'window',
    attention: 'none',
    maxBlocks: (bs) => blocksOf(window, bs),
    select(v) {
      const keep = blocksOf(window, v.blockSize);
      return v.numBlocks <= keep ? KEEP_ALL : span(0, v.numBlocks - keep);
    },
  });
}

/** Options of {@link sinksPolicy}. */
export interface SinksPolicyOptions {
  /** First tokens kept for good as attention sinks (rounded up to whole blocks). */
  readonly sinks: number;
  /** Most recent tokens kept (rounded up to whole blocks). */
  readonly window: number;
}

/**
 * `sinks` (StreamingLLM, Xiao et al. 2023): the first `ceil(sinks / blockSize)` blocks plus the
 * most recent `ceil(window / blockSize)`; everything between is dropped.
 * @throws {SchedulerError} INVALID_ARGUMENT for a parameter that is not a positive integer.
 */
export function sinksPolicy(options: SinksPolicyOptions): KvCompressionPolicy {
  const sinks = tokens('sinks', 'sinks', options?.sinks);
  const window = tokens('sinks', 'window', options?.window);
  return defineKvCompressionPolicy({
    name: 'sinks',
    attention: 'none',
    maxBlocks: (bs) => blocksOf(sinks, bs) + blocksOf(window, bs),
    select(v) {
      const head = blocksOf(sinks, v.blockSize);
      const tail = blocksOf(window, v.blockSize);
      return v.numBlocks <= head + tail ? KEEP_ALL : span(head, v.numBlocks - tail);
    },
  });
}

/** Options of {@link h2oPolicy}. */
export interface H2oPolicyOptions {
  /** Tokens held at most (rounded up to whole blocks). */
  readonly budget: number;
  /** Share of the budget kept for the most recent blocks, in (0, 1]; default 0.5. */
  readonly recent?: number;
}

/**
 * `h2o` (Heavy-Hitter Oracle, Zhang et al. 2023), per block: at most `ceil(budget / blockSize)`
 * blocks: the most recent `max(1, round(recent × that))`, and of the older ones those with the
 * largest accumulated attention (every query's, prefill chunks included). The first block is
 * not special unless it scores.
 * @throws {SchedulerError} INVALID_ARGUMENT for a bad budget or recent share.
 */
export function h2oPolicy(options: H2oPolicyOptions): KvCompressionPolicy {
  const budget = tokens('h2o', 'budget', options?.budget);
  const recent = options.recent ?? 0.5;
  if (typeof recent !== 'number' || !(recent > 0 && recent <= 1)) {
    throw new SchedulerError('INVALID_ARGUMENT', `h2o: recent must be in (0, 1], got ${recent}`, {
      details: { policy: 'h2o', parameter: 'recent', value: recent },
    });
  }
  return defineKvCompressionPolicy({
    name: 'h2o',
    attention: 'decode',
    maxBlocks: (bs) => blocksOf(budget, bs),
    select(v) {
      const total = blocksOf(budget, v.blockSize);
      if (v.numBlocks <= total) return KEEP_ALL;
      const recentBlocks = Math.min(total, Math.max(1, Math.round(recent * total)));
      return dropAllButTop(
        span(0, v.numBlocks - recentBlocks),
        v.blockScores,
        total - recentBlocks,
      );
    },
  });
}

/** Options of {@link snapkvPolicy}. */
export interface SnapkvPolicyOptions {
  /** Tokens held at most after the prompt (rounded up to whole blocks). */
  readonly budget: number;
  /** Final prompt tokens whose attention picks the prompt blocks kept; default 16. */
  readonly observation?: number;
}

/**
 * `snapkv` (Li et al. 2024), per block: the prompt is computed whole; at its end the last
 * `observation` prompt tokens' attention picks the earlier prompt blocks to keep, next to the
 * blocks of the observation window itself, within `ceil(budget / blockSize)` blocks. During
 * decode the picked prompt blocks stay and the rest is a window over the tail: the oldest
 * window or generated block goes first.
 * @throws {SchedulerError} INVALID_ARGUMENT for a bad budget or observation window.
 */
export function snapkvPolicy(options: SnapkvPolicyOptions): KvCompressionPolicy {
  const budget = tokens('snapkv', 'budget', options?.budget);
  const observation = tokens('snapkv', 'observation', options.observation ?? 16);
  return defineKvCompressionPolicy({
    name: 'snapkv',
    attention: 'prefill-end',
    observationWindow: observation,
    maxBlocks: (bs) => blocksOf(budget, bs),
    select: (v) => snapkvSelect(v, blocksOf(budget, v.blockSize), observation),
  });
}

function snapkvSelect(v: KvCompressionView, total: number, observation: number): number[] {
  if (!v.prefillDone || v.numBlocks <= total) return [];
  const bs = v.blockSize;
  const prompt = v.promptTokens;
  const w = Math.min(observation, prompt);
  // Blocks the observation window spans: the prompt is never compressed before it ends, so
  // its blocks start at multiples of the block size.
  const windowBlocks = Math.floor((prompt - 1) / bs) - Math.floor((prompt - w) / bs) + 1;
  const promptSlots = Math.max(0, total - windowBlocks);
  const older: number[] = [];
  const rest: number[] = [];
  for (let i = 0; i < v.numBlocks - 1; i++) {
    (v.blockStarts[i]! + bs <= prompt - w ? older : rest).push(i);
  }
  const dropOlder = dropAllButTop(older, v.blockScores, promptSlots);
  const keptOlder = older.length - dropOlder.length;
  // The tail block is always kept: it is the last of `rest` counted here.
  const keepRest = total - keptOlder - 1;
  const dropRest = rest.slice(0, Math.max(0, rest.length - keepRest));
  return [...dropOlder, ...dropRest].sort((a, b) => a - b);
}

/** Names of the built-in compression policies. */
export type KvCompressionPolicyName = 'window' | 'sinks' | 'h2o' | 'snapkv';

/** Each built-in's parameters (in tokens, except h2o's `recent` share), for parsing. */
export const KV_COMPRESSION_PARAMETERS: Readonly<
  Record<KvCompressionPolicyName, readonly string[]>
> = {
  window: ['window'],
  sinks: ['sinks', 'window'],
  h2o: ['budget', 'recent'],
  snapkv: ['budget', 'observation'],
};

/** The built-in compression policies by name, each a factory of its options. */
export const kvCompressionPolicies: {
  readonly window: typeof windowPolicy;
  readonly sinks: typeof sinksPolicy;
  readonly h2o: typeof h2oPolicy;
  readonly snapkv: typeof snapkvPolicy;
} = { window: windowPolicy, sinks: sinksPolicy, h2o: h2oPolicy, snapkv: snapkvPolicy };
