// The token-level KV compression plug-in contract: which blocks of a live sequence to drop.
import { SchedulerError } from '../errors.js';
import { checkContract } from '../policies/queue-policy.js';

/** The version of the {@link KvCompressionPolicy} contract this package implements. */
export const KV_COMPRESSION_POLICY_SPECIFICATION_VERSION = 'v1';

/**
 * What a compression policy sees of one sequence's cache, after a step. Arrays are indexed by
 * logical block (the block table's order, oldest first); the last block is the one still filling.
 * They are views the scheduler reuses: read them inside `select`, do not keep them.
 */
export interface KvCompressionView {
  readonly blockSize: number;
  /** Blocks this sequence holds now (its block table's length). */
  readonly numBlocks: number;
  /** Tokens in its cache now. */
  readonly numTokens: number;
  /** Tokens that have entered its cache so far (prompt and generated), dropped ones included. */
  readonly totalTokens: number;
  readonly promptTokens: number;
  /** True once every prompt token is in the cache (or was dropped). */
  readonly prefillDone: boolean;
  /**
   * Per held block: attention mass accumulated since the block entered the cache (zeros when
   * the policy asks for none, see `attention`).
   */
  readonly blockScores: Float32Array;
  /** Per held block: original index of its first token (prompt token 0 is index 0). */
  readonly blockStarts: Int32Array;
}

/**
 * Decides which cached blocks of a live sequence to drop (contract `v1`), so one sequence's
 * context can outgrow the memory it may use: sinks plus a window, heavy hitters (H2O), SnapKV,
 * or a scoring rule of your own. Called after every step the sequence ran in, and between the
 * chunks of a long prompt. Make one with {@link defineKvCompressionPolicy}.
 */
export interface KvCompressionPolicy {
  /** The contract version the policy was written against; `'v1'`. */
  readonly specificationVersion: typeof KV_COMPRESSION_POLICY_SPECIFICATION_VERSION;
  /** Name for logs and metrics (blocks held and tokens dropped are reported per name). */
  readonly name: string;
  /**
   * Which attention mass the policy needs in `blockScores`: 'none' (none is computed: free),
   * 'decode' (every step: the new token's attention on decodes, every query's on prefill
   * chunks), or 'prefill-end' (the last `observationWindow` prompt tokens' attention, once).
   */
  readonly attention: 'none' | 'decode' | 'prefill-end';
  /** For 'prefill-end': how many final prompt tokens observe the prompt (default 16). */
  readonly observationWindow?: number;
  /**
   * Most blocks the sequence may hold after a step. The scheduler budgets memory with it, and
   * drops the oldest blocks a `select` leaves beyond it (except, for 'prefill-end' policies,
   * before the prompt is complete: their prefill must fit whole).
   */
  maxBlocks(blockSize: number): number;
  /** Logical block indices to drop now: distinct, never the last block; [] keeps everything. */
  select(view: KvCompressionView): readonly number[];
}

/**
 * Makes a {@link KvCompressionPolicy} stamped with the contract version.
 * @throws {SchedulerError} INVALID_POLICY for a missing hook, name or bad `attention`.
 */
export function defineKvCompressionPolicy(
  hooks: Omit<KvCompressionPolicy, 'specificationVersion'>,
): KvCompressionPolicy {
  return validateKvCompressionPolicy({
    ...hooks,
    specificationVersion: KV_COMPRESSION_POLICY_SPECIFICATION_VERSION,
  });
}

/**
 * Checks that `value` is a {@link KvCompressionPolicy} of a version this package implements.
 * @throws {SchedulerError} INVALID_POLICY naming what is missing or wrong.
 */
export function validateKvCompressionPolicy(value: unknown): KvCompressionPolicy {
  checkContract(
    value,
    'KV compression policy',
    KV_COMPRESSION_POLICY_SPECIFICATION_VERSION,
    'defineKvCompressionPolicy',
    ['maxBlocks', 'select'],
  );
  const v = value as Record<string, unknown>;
  const bad = (message: string): never => {
    throw new SchedulerError(
      'INVALID_POLICY',
      `KV compression policy ${String(v.name)}: ${message}`,
    );
  };
  if (v.attention !== 'none' && v.attention !== 'decode' && v.attention !== 'prefill-end') {
    bad(`attention must be 'none', 'decode' or 'prefill-end', got ${JSON.stringify(v.attention)}`);
  }
  const w = v.observationWindow;
  if (w !== undefined && !(Number.isInteger(w) && (w as number) >= 1)) {
    bad(`observationWindow must be an integer ≥ 1, got ${String(w)}`);
  }
  return value as KvCompressionPolicy;
}
