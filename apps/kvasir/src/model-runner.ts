import type { KvLayout } from '@kvasir/kv-allocator';
import type { EngineConfig } from './config.js';
import { KvasirAppError } from './errors.js';
import type { ModelRunner } from './runner.js';

/** A model whose weights are loaded, before its KV cache is allocated. */
export interface LoadedModel {
  readonly modelId: string;
  readonly weightDigest: string;
  readonly weightBytes: number;
  readonly maxModelLen: number;
  readonly kvLayout: KvLayout;
  /** Largest storage binding one layer's cache may use. */
  readonly maxBindingBytes: number;
  /** Backend and adapter, in words. */
  readonly backend: string;
  /** Scratch memory one step needs at this batch size. */
  activationBytes(maxTokens: number, maxSeqs: number): number;
  /** Allocates the paged KV cache and returns the runner the engine drives. */
  allocate(numBlocks: number): Promise<ModelRunner>;
  /** Releases the weights and the device when no runner was allocated. */
  dispose(): Promise<void>;
}

/**
 * Loads a checkpoint (HF directory or `.gguf`) through @kvasir/model on the configured backend.
 * @throws KvasirAppError `MODEL_LOAD` when the checkpoint cannot be loaded.
 */
export async function loadModelRunner(path: string, _config: EngineConfig): Promise<LoadedModel> {
  throw new KvasirAppError(
    'MODEL_LOAD',
    `cannot load ${path}: @kvasir/model has no forward pass yet`,
  );
}
