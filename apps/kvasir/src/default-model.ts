import { randomUUID } from 'node:crypto';
import { access, mkdir, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { hfDir, modelInfo } from '@kvasir/mini-model';
import { type ModelConfig, makeModelConfig, writeRandomCheckpoint } from '@kvasir/model';

/** The name the default model, kvasir-mini from `@kvasir/mini-model`, is served under. */
export const DEFAULT_MODEL_NAME: string = modelInfo.name;

/** The directory of the default model (the package's Hugging Face directory). */
export const DEFAULT_MODEL_PATH: string = hfDir;

/**
 * What `--model` (or `model` in a config file) says to serve the seeded random-weight model
 * instead of a path: fast to load, same bytes for the same seed, output noise. For tests.
 */
export const RANDOM_MODEL = 'random';

/** The name the random-weight model is served under. */
export const RANDOM_MODEL_NAME = 'kvasir-random-tiny';

/** Bump when the random model's shape changes, so old cache directories are not reused. */
const RANDOM_MODEL_VERSION = 2;

/**
 * What the default model is, in a few lines for banners: name, size, data, how far it was
 * trained, that it is small, and its licence.
 */
export function describeDefaultModel(): string[] {
  const m = modelInfo;
  const millions = (m.parameters / 1e6).toFixed(1);
  const steps = (n: number) => n.toLocaleString('en-US');
  const ppl = m.heldout ? `, held-out perplexity ${m.heldout.perplexity.toFixed(1)}` : '';
  return [
    `${m.name}: a small Llama (${millions}M parameters, ${m.architecture.contextLength}-token context) trained by Kvasir`,
    'on the King James Bible, fortunes, WordNet glosses and the Brown Corpus.',
    m.step >= m.totalSteps
      ? `Trained for ${steps(m.totalSteps)} steps${ppl}.`
      : `Partly trained: step ${steps(m.step)} of ${steps(m.totalSteps)}${ppl}.`,
    'It writes English, not reliable answers. Non-commercial research use only (Brown Corpus).',
  ];
}

/**
 * The random-weight model: a small Llama (GQA 4/2, 4 layers, width 128, 1,024-token context)
 * with seeded random weights and a byte-level BPE tokenizer. Small enough that the software
 * adapter and the CPU backend serve it quickly; its output is noise.
 */
export function randomModelConfig(): ModelConfig {
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

/**
 * Returns the directory of the random-weight model, writing it on first use. The same seed always
 * gives the same bytes; a crash half-way leaves no partial directory behind (it is written under
 * a temporary name and renamed).
 */
export async function ensureRandomModel(cacheDir: string, seed: number): Promise<string> {
  const dir = join(cacheDir, `${RANDOM_MODEL_NAME}-v${RANDOM_MODEL_VERSION}-seed${seed}`);
  try {
    await access(join(dir, 'config.json'));
    return dir;
  } catch {
    // not there yet
  }
  await mkdir(cacheDir, { recursive: true });
  const tmp = `${dir}.tmp-${randomUUID()}`;
  await writeRandomCheckpoint(tmp, randomModelConfig(), seed);
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
