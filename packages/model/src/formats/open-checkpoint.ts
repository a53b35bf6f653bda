import { stat } from 'node:fs/promises';
import { ModelError } from '../errors.js';
import type { CheckpointReader, OpenCheckpointOptions } from './checkpoint-reader.js';
import { openGgufCheckpoint } from './gguf/reader.js';
import { openSafetensorsCheckpoint } from './safetensors.js';

/**
 * Opens a checkpoint: a Hugging Face directory (`config.json` and `model.safetensors` or a
 * sharded `model.safetensors.index.json`) or a `.gguf` file, detected from the path.
 *
 * @throws {@link ModelError} `IO` when the path does not exist, or where there is no file system
 *   (a browser: use `openGgufBytes`); any reader error otherwise.
 */
export async function openCheckpoint(
  path: string,
  options?: OpenCheckpointOptions,
): Promise<CheckpointReader> {
  // A browser bundle has node:fs disabled (the package.json `browser` field).
  if (typeof stat !== 'function') {
    throw new ModelError(
      'IO',
      `cannot open checkpoint path ${path}: this runtime has no file system; open the file's bytes with openGgufBytes`,
      { details: { file: path } },
    );
  }
  let st: Awaited<ReturnType<typeof stat>>;
  try {
    st = await stat(path);
  } catch (e) {
    throw new ModelError('IO', `checkpoint path ${path} does not exist`, {
      cause: e,
      details: { file: path },
    });
  }
  if (st.isDirectory()) {
    return openSafetensorsCheckpoint(path, options);
  }
  return openGgufCheckpoint(path, options);
}
