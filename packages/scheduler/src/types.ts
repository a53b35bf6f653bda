import type { BlockCopy, BlockId, ExtraKeys } from '@kvasir/kv-allocator';
import type { KvCompressionSpec } from './kv-compression/parse.js';

/** Why a request ended. */
export type FinishReason = 'stop' | 'length' | 'abort' | 'rejected';

/** How a preempted request gets its KV back: recomputed from its tokens, or copied back from host. */
export type PreemptionMode = 'recompute' | 'swap';

/** One generation request handed to `Scheduler.add`. */
export interface SchedulerRequest {
  /** Unique among live requests. */
  readonly id: string;
  /**
   * Prompt token ids (integers in [0, 2^31)), at least one, at most `maxModelLen` (longer with
   * a `kvCompression` in 'cache' positions that compresses between prefill chunks).
   */
  readonly promptTokenIds: ArrayLike<number>;
  /** Tokens to generate at most, ≥ 1. */
  readonly maxTokens: number;
  /** Parallel samples sharing the prompt's KV (OpenAI `n`). Default 1. */
  readonly n?: number;
  /**
   * Beam width for beam search (≥ 2). The group keeps this many beams; `update` then needs
   * candidate tokens with log-probabilities for every beam. Exclusive with `n > 1`.
   */
  readonly beamWidth?: number;
  /** Any of these ends a sequence with `'stop'` (the stop token is kept in the output). */
  readonly stopTokenIds?: readonly number[];
  /** End-of-sequence token; overrides the scheduler's `eosTokenId`. */
  readonly eosTokenId?: number;
  /** Keep generating past EOS (benchmarks). Default false. */
  readonly ignoreEos?: boolean;
  /** Lower runs first (vLLM's convention). A finite number; default 0. */
  readonly priority?: number;
  /** Arrival time on the scheduler's clock; default `clock()` at `add`. */
  readonly arrivalTime?: number;
  /** Mixed into prefix-cache hashes (model, adapter, cache salt). */
  readonly extraKeys?: ExtraKeys;
  /**
   * Compute every prompt token instead of reusing cached prefix blocks (a request that needs
   * the logits of its whole prompt, such as prompt log-probabilities). Its full blocks still
   * enter the prefix cache for other requests. Default false.
   */
  readonly skipPrefixCache?: boolean;
  /**
   * Token-level KV compression: the policy that drops this request's cached blocks once its
   * context outgrows the policy's budget, and which positions kept tokens use. With positions
   * 'cache', `maxTokens` may run past `maxModelLen`. Not with `beamWidth`.
   */
  readonly kvCompression?: KvCompressionSpec;
}

/** RoPE re-rotation of one physical block's keys, on every layer, before the forward pass. */
export interface KeyShift {
  /** Physical block id. */
  readonly block: BlockId;
  /** Positions the block's keys move by (negative: back, after blocks before it were dropped). */
  readonly delta: number;
}

/** A block transfer between GPU memory and a host slot, for swap preemption. */
export interface SwapTransfer {
  readonly gpuBlock: BlockId;
  /** Index of a host-tier slot, 0 ≤ hostSlot < `hostSwapBlocks`. */
  readonly hostSlot: number;
  /** The request whose sequence holds the block. */
  readonly requestId: string;
}

/** One sequence's part of a batch plan. */
export interface PlanRow {
  /** Allocator sequence id (unique per sequence, not per request). */
  readonly seqId: number;
  readonly requestId: string;
  /** Index of the sequence in its request's outputs (parallel samples, beams). */
  readonly index: number;
  /** Offset of this row's first token in the flattened arrays. */
  readonly queryStart: number;
  /** Tokens computed for this row in this step. */
  readonly queryLen: number;
  /** Tokens in the KV cache after this step (earlier tokens + this row's). */
  readonly contextLen: number;
  /** Prefill (more than one token, or the first token of a prompt) vs decode. */
  readonly isPrefill: boolean;
  /** The row's physical blocks, logical order (a view into `blockTables`). */
  readonly blockTable: Uint32Array;
  /**
   * Output, for a compressed request whose policy needs attention this step: the forward pass
   * fills entries [0, ceil(contextLen / blockSize)) with the attention mass each logical block
   * gets from the row's last `massQueries` queries (summed over layers and heads). The
   * scheduler owns it and reads it back in `update()`.
   */
  readonly attentionMass?: Float32Array;
  /** How many of the row's last query tokens count in `attentionMass`. */
  readonly massQueries?: number;
}

/** One KV cache group's part of a {@link BatchPlan}. */
export interface BatchKvGroup {
  readonly slotMapping: Int32Array;
  readonly blockTables: readonly Int32Array[];
}

/**
 * What the model runs in one step. Run `swapOut`, then `swapIn`, then `copies`, then the
 * forward pass over the flattened tokens; sample one token per entry of `logitsIndices`.
 */
export interface BatchPlan {
  /** Step counter, from 1. */
  readonly step: number;
  readonly numTokens: number;
  readonly numPrefillTokens: number;
  readonly numDecodeTokens: number;
  /** Flattened token ids of every row, row after row. */
  readonly tokenIds: Int32Array;
  /** Position of each flattened token in its sequence. */
  readonly positions: Int32Array;
  /** KV-cache slot (block × blockSize + offset) each token's K/V is written to. */
  readonly slotMapping: Int32Array;
  readonly rows: readonly PlanRow[];
  /** numRows + 1 offsets: row r's tokens are [queryStartLoc[r], queryStartLoc[r+1]). */
  readonly queryStartLoc: Int32Array;
  /** Per row: tokens in the KV cache after this step. */
  readonly contextLens: Int32Array;
  /** numRows × maxBlocksPerSeq block ids, padded with 0. */
  readonly blockTables: Uint32Array;
  readonly maxBlocksPerSeq: number;
  /**
   * With KV cache groups (a manager of several): the slots and per-row block tables of groups
   * 1 and on, in the rows' order (group 0's are `slotMapping` and `blockTables`). A sliding
   * group's table holds -1 for blocks released before its window.
   */
  readonly kvGroups?: readonly BatchKvGroup[];
  /**
   * Flattened-token index whose logits each sample reads. Several samples may read the same
   * row (the n samples of a prompt's last token).
   */
  readonly logitsIndices: Int32Array;
  /** The sequence each sample belongs to, aligned with `logitsIndices`. Pass to `update`. */
  readonly sampleSeqIds: Int32Array;
  /** The row each sample's logits come from (its request id, for per-request sampling). */
  readonly sampleRows: Int32Array;
  /** Each sample's sequence index within its request (per-sample seeds). */
  readonly sampleIndices: Int32Array;
  /** Copy-on-write block copies, run after swaps and before the forward pass. */
  readonly copies: readonly BlockCopy[];
  /**
   * Key re-rotations, run after `copies` and before the forward pass: compressed requests in
   * 'cache' positions whose kept blocks moved back when blocks before them were dropped.
   */
  readonly keyShifts: readonly KeyShift[];
  /** GPU → host copies of preempted sequences' blocks, run first. */
  readonly swapOut: readonly SwapTransfer[];
  /** Host → GPU copies of resumed sequences' blocks, run after `swapOut`. */
  readonly swapIn: readonly SwapTransfer[];
  /** Token budget of the step (`maxNumBatchedTokens`), for utilization. */
  readonly tokenBudget: number;
}

/** Sampled tokens of one step, aligned with the plan's `sampleSeqIds`. */
export interface StepResult {
  readonly seqIds: ArrayLike<number>;
  readonly tokenIds: ArrayLike<number>;
  /** Log-probability of each sampled token (accumulated per sequence). */
  readonly logprobs?: ArrayLike<number>;
  /**
   * Jump-forward decoding: tokens known to follow each sampled token without a forward pass
   * (an output grammar forces them), aligned with `seqIds` (`undefined` or empty: none).
   * They are appended after the sampled token, with the same stop conditions applied after each
   * one, and computed in the next steps as one chunk, as a prompt is. Not for beam search.
   */
  readonly forcedTokenIds?: readonly (ArrayLike<number> | undefined)[];
  /**
   * Beam search: `k` candidates per sample, `tokenIds[i*k + j]` with `logprobs[i*k + j]`.
   * Required for samples of beam-search requests; `tokenIds`/`logprobs` above are then ignored
   * for them.
   */
  readonly beamCandidates?: {
    readonly k: number;
    readonly tokenIds: ArrayLike<number>;
    readonly logprobs: ArrayLike<number>;
  };
}

/** One finished sequence of a request. */
export interface SequenceOutput {
  readonly index: number;
  /** Generated token ids (a stop token that ended the sequence included). */
  readonly tokenIds: Int32Array;
  readonly finishReason: FinishReason;
  /** Sum of the sampled tokens' log-probabilities (when given to `update`). */
  readonly cumulativeLogprob: number;
}

/** Everything about a request that ended. */
export interface RequestOutput {
  readonly requestId: string;
  /** The request's reason: its first sequence's, or 'abort' / 'rejected' for all. */
  readonly finishReason: FinishReason;
  /** Human-readable detail for 'rejected' (and for cache-capacity 'length'). */
  readonly reason?: string;
  /** Sequences ordered by index (beam search: by score, best first). */
  readonly outputs: readonly SequenceOutput[];
  readonly numPromptTokens: number;
  /** Prompt tokens served from the prefix cache at first admission. */
  readonly numCachedPromptTokens: number;
  readonly numPreemptions: number;
  readonly arrivalTime: number;
  /** Clock time of the first sampled token, or undefined when none was sampled. */
  readonly firstTokenTime: number | undefined;
  readonly finishTime: number;
}

/** Scheduler events, for logs and metrics. */
export type SchedulerEvent =
  | {
      readonly type: 'preempt';
      readonly requestId: string;
      readonly mode: PreemptionMode;
      /** Swap was asked for but the host tier was full. */
      readonly fellBackToRecompute: boolean;
      readonly step: number;
    }
  | { readonly type: 'swap-in'; readonly requestId: string; readonly step: number }
  | { readonly type: 'finish'; readonly output: RequestOutput }
  | {
      readonly type: 'step';
      readonly step: number;
      readonly numTokens: number;
      readonly tokenBudget: number;
      readonly numRows: number;
      readonly maxNumSeqs: number;
    };

/** Counters and gauges (`Scheduler.metrics()`). */
/** A live request as a picture of the cache shows it: its state and its sequences' allocator ids. */
export interface LiveRequestSequences {
  readonly requestId: string;
  /** `waiting` (queued or preempted by recompute), `running`, or `swapped` (blocks in host slots). */
  readonly state: 'waiting' | 'running' | 'swapped';
  /** Prompt tokens found in the prefix cache when it was admitted. */
  readonly cachedPromptTokens: number;
  /** Its unfinished sequences (one per sample or beam); `seqId` keys the allocator's block table. */
  readonly seqs: readonly {
    readonly seqId: number;
    readonly index: number;
    readonly numTokens: number;
    /** Tokens KV compression dropped from its cache. */
    readonly numDropped: number;
  }[];
}

export interface SchedulerMetrics {
  readonly numRunning: number;
  readonly numWaiting: number;
  readonly numSwapped: number;
  /** Waiting requests that were preempted by recompute and wait to resume. */
  readonly numPreemptedWaiting: number;
  readonly preemptionsRecompute: number;
  readonly preemptionsSwap: number;
  /** Swap preemptions that fell back to recompute because host slots ran out. */
  readonly swapFallbacks: number;
  /** Prompt tokens looked up at first admission, and found in the prefix cache. */
  readonly prefixQueryTokens: number;
  readonly prefixHitTokens: number;
  /**
   * Tokens served from cache when re-admitting a recompute-preempted request: kept apart so
   * recompute does not inflate the hit rate (vLLM #25780).
   */
  readonly recomputeHitTokens: number;
  readonly steps: number;
  /** Tokens scheduled in the last step, and its budget. */
  readonly lastStepTokens: number;
  readonly tokenBudget: number;
  /** Sum over steps of scheduled tokens ÷ budget, ÷ steps. */
  readonly meanBudgetUse: number;
  readonly finished: number;
  readonly aborted: number;
  readonly rejected: number;
  readonly hostSlotsUsed: number;
  readonly hostSlotsTotal: number;
  /** Token-level KV compression, per policy name (absent names: never used). */
  readonly kvCompression: Readonly<Record<string, KvCompressionMetrics>>;
}

/** One compression policy's figures in `SchedulerMetrics.kvCompression`. */
export interface KvCompressionMetrics {
  /** Live requests using it. */
  readonly requests: number;
  /** Blocks those requests hold now. */
  readonly blocksHeld: number;
  /** Tokens dropped from caches by it so far (ended requests included). */
  readonly tokensDropped: number;
}
