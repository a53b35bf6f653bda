import type { CheckpointReader, OpenCheckpointOptions } from './checkpoint.js';
import { ModelError } from './errors.js';

/**
 * Opens a GGUF checkpoint (llama architecture).
 *
 * @throws {@link ModelError} always in this build: GGUF reading is being implemented.
 */
export async function openGgufCheckpoint(
  path: string,
  _options?: OpenCheckpointOptions,
): Promise<CheckpointReader> {
  throw new ModelError('UNSUPPORTED_ARCHITECTURE', `${path}: GGUF reading is not implemented yet`);
}
