import type { CheckpointReader } from './checkpoint.js';
import { ModelError } from './errors.js';
import type { KvCacheSpec } from './kv-cache.js';
import type { Executor } from './model.js';
import type { LoadWeightsOptions } from './weights.js';

/**
 * The WebGPU executor (not wired yet): returns undefined so `'auto'` falls back to the CPU.
 * @throws {ModelError} `BACKEND` when WebGPU is required.
 */
export async function createGpuExecutor(
  _reader: CheckpointReader,
  _kv: KvCacheSpec,
  _weights: LoadWeightsOptions,
  options: { gpu: unknown; required: boolean },
): Promise<Executor | undefined> {
  if (options.required) throw new ModelError('BACKEND', 'the WebGPU backend is not available yet');
  return undefined;
}
