import { randomUUID } from 'node:crypto';
import { access, mkdir, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { type ModelConfig, makeModelConfig, writeRandomCheckpoint } from '@kvasir/model';

/** Bump when the default model's shape changes, so old cache directories are not reused. */
const DEFAULT_MODEL_VERSION = 2;

/**
 * The embedded default: a small Llama (GQA 4/2, 4 layers, width 128, 1,024-token context) with
 * seeded random weights and a byte-level BPE tokenizer. Small enough that the software adapter
 * and the CPU backend serve it quickly; its output is noise.
 */
export function defaultModelConfig(): ModelConfig {
  return makeModelConfig({
    architecture: 'llama',
    hiddenSize: 128,
    intermediateSize: 384,
    numLayers: 4,
    numHeads: 4,
    numKvHeads: 2,
    vocabSize: 512,
    maxPositionEmbeddings: 1024,
    tieWordEmbeddings: false,
  });
}

/** The name the default model is served under. */
export const DEFAULT_MODEL_NAME = 'kvasir-random-tiny';

/**
 * Returns the directory of the embedded default checkpoint, writing it on first use. The same
 * seed always gives the same bytes; a crash half-way leaves no partial directory behind (it is
 * written under a temporary name and renamed).
 */
export async function ensureDefaultModel(cacheDir: string, seed: number): Promise<string> {
  const dir = join(cacheDir, `${DEFAULT_MODEL_NAME}-v${DEFAULT_MODEL_VERSION}-seed${seed}`);
  try {
    await access(join(dir, 'config.json'));
    return dir;
  } catch {
    // not there yet
  }
  await mkdir(cacheDir, { recursive: true });
  const tmp = `${dir}.tmp-${randomUUID()}`;
  await writeRandomCheckpoint(tmp, defaultModelConfig(), seed);
  try {
    await rename(tmp, dir);
  } catch (error) {
    // Another process won the race: use its copy.
    await rm(tmp, { recursive: true, force: true });
    await access(join(dir, 'config.json')).catch(() => {
      throw error;
    });
  }
  return dir;
}
