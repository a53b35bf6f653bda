import { ModelError } from '../errors.js';
import type { CheckpointReader } from '../formats/checkpoint-reader.js';
import type { NormalizedPlan } from './forward-plan.js';
import type { KvBlockIo } from './kv-blocks.js';
import type { KvCacheSpec } from './kv-cache.js';
import type { LoadWeightsOptions } from './weights.js';

/**
 * What a backend implements: one step over a validated plan, block transfers on its own
 * cache, and teardown. {@link loadModel} validates plans and block ids before calling it and
 * serializes every call, so an executor never sees two calls at once.
 */
export interface Executor {
  /**
   * Runs one step over the executor's layers. A whole model (or the last shard) returns logits
   * `[plan.logitsIndices.length][vocabSize]`; a shard before the last returns the hidden states
   * `[plan.numTokens][hiddenSize]` its last layer wrote. A shard after the first takes the
   * previous shard's hidden states as `hidden` instead of embedding `plan.tokenIds`.
   */
  forward(plan: NormalizedPlan, hidden?: Float32Array): Promise<Float32Array>;
  /** Whole-block reads and writes of the executor's KV cache (swap, offload). */
  readonly blocks: KvBlockIo;
  /** Frees weights, cache and (when the executor created it) the device. */
  destroy(): Promise<void>;
}

/** What every backend is built from. */
export interface ExecutorContext {
  /** The open checkpoint; the executor streams weights from it and must not close it. */
  readonly reader: CheckpointReader;
  /** The KV cache to allocate (layout shared by every backend, so blocks move between them). */
  readonly kv: KvCacheSpec;
  /** How to store the weights. */
  readonly weights: LoadWeightsOptions;
  /**
   * The layers this executor runs when it is one shard of a model split by layer (default:
   * all). `kv.numLayers` is then the slice's layer count: the executor holds its layers' cache
   * only.
   */
  readonly layers?: LayerSlice;
}

/**
 * A contiguous range of a model's layers. The shard holding layer 0 embeds the tokens; the one
 * holding the last layer applies the final norm and the logits head.
 */
export interface LayerSlice {
  readonly firstLayer: number;
  readonly numLayers: number;
}

/** What a slice runs besides its layers, for a model of `totalLayers` layers. @internal */
export function sliceRole(
  slice: LayerSlice | undefined,
  totalLayers: number,
): {
  readonly first: number;
  readonly count: number;
  readonly embed: boolean;
  readonly head: boolean;
} {
  const first = slice?.firstLayer ?? 0;
  const count = slice?.numLayers ?? totalLayers;
  return { first, count, embed: first === 0, head: first + count === totalLayers };
}

/**
 * Checks a shard's input hidden states.
 * @throws {ModelError} `INVALID_ARGUMENT` when they are missing or not `[tokens][hiddenSize]`.
 * @internal
 */
export function checkHidden(
  hidden: Float32Array | undefined,
  tokens: number,
  hiddenSize: number,
): Float32Array {
  if (!(hidden instanceof Float32Array) || hidden.length !== tokens * hiddenSize) {
    throw new ModelError(
      'INVALID_ARGUMENT',
      `a shard after the first needs the previous shard's hidden states (${tokens} × ${hiddenSize} floats), got ${hidden instanceof Float32Array ? hidden.length : 'none'}`,
    );
  }
  return hidden;
}
