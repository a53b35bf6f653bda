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
  /** Runs one step; returns logits `[plan.logitsIndices.length][vocabSize]`. */
  forward(plan: NormalizedPlan): Promise<Float32Array>;
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
}
