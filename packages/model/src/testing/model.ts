// Test-only helpers shared by the model tests.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createGpu, type Gpu } from '@kvasir/gpu';
import { type ModelConfig, makeModelConfig } from '../config.js';
import type { ForwardPlan } from '../execution/forward-plan.js';
import { writeRandomCheckpoint } from '../formats/random-checkpoint.js';

let sharedGpu: Promise<Gpu> | undefined;

/**
 * One `Gpu` for the WebGPU models of a test file (vitest runs each file in its own worker), as
 * the app shares one device: the software adapter compiles each kernel once per device, seconds
 * each, so a model loaded on a fresh device pays again for every kernel. Call
 * {@link releaseTestGpu} in `afterAll`, after destroying the models.
 */
export function testGpu(): Promise<Gpu> {
  sharedGpu ??= createGpu({ label: 'kvasir-model-test' });
  return sharedGpu;
}

/**
 * `loadModel` options of the fixture suites on `backend`: an f32 cache of 16-token blocks, the
 * file's shared `Gpu` on WebGPU, 2 threads on wasm.
 */
export async function fixtureLoadOptions(backend: 'cpu' | 'webgpu' | 'wasm', numBlocks: number) {
  return {
    backend,
    numBlocks,
    blockSize: 16,
    kvFormat: 'f32' as const,
    ...(backend === 'webgpu' ? { gpu: await testGpu() } : {}),
    ...(backend === 'wasm' ? { threads: 2 } : {}),
  };
}

/** Destroys the file's shared `Gpu` (see {@link testGpu}). */
export async function releaseTestGpu(): Promise<void> {
  const gpu = sharedGpu;
  sharedGpu = undefined;
  if (gpu !== undefined) (await gpu).destroy();
}

/** A tiny GQA config the tests run on every backend (head dim 64: what GPU attention takes). */
export function tinyConfig(over: Partial<ModelConfig> = {}): ModelConfig {
  return makeModelConfig({
    hiddenSize: 128,
    intermediateSize: 192,
    numLayers: 2,
    numHeads: 2,
    numKvHeads: 1,
    headDim: 64,
    vocabSize: 272,
    ...over,
  });
}

/** Writes a random HF checkpoint in a fresh temp dir; returns it and a cleanup. */
export async function tempCheckpoint(
  config: ModelConfig,
  seed: number,
): Promise<{ dir: string; root: string; cleanup: () => Promise<void> }> {
  const root = await mkdtemp(join(tmpdir(), 'kvasir-model-'));
  const dir = join(root, 'hf');
  await writeRandomCheckpoint(dir, config, seed);
  return { dir, root, cleanup: () => rm(root, { recursive: true, force: true }) };
}

/** A plan for one sequence computing tokens `[start, start + tokens.length)`. */
export function seqPlan(
  tokens: readonly number[],
  start: number,
  blockTable: readonly number[],
  blockSize: number,
  logitsRows: 'last' | 'all' = 'all',
): ForwardPlan {
  const n = tokens.length;
  const slot = (p: number) =>
    (blockTable[Math.floor(p / blockSize)] as number) * blockSize + (p % blockSize);
  return {
    tokenIds: Int32Array.from(tokens),
    positions: Int32Array.from({ length: n }, (_, i) => start + i),
    slotMapping: Int32Array.from({ length: n }, (_, i) => slot(start + i)),
    rows: [{ queryStart: 0, queryLen: n, contextLen: start + n, blockTable }],
    logitsIndices:
      logitsRows === 'last' ? Int32Array.of(n - 1) : Int32Array.from({ length: n }, (_, i) => i),
  };
}

/** Concatenates single-sequence plans into one batch plan. */
export function mergePlans(plans: readonly ForwardPlan[]): ForwardPlan {
  const cat = (f: (p: ForwardPlan) => Int32Array) => {
    const parts = plans.map(f);
    const out = new Int32Array(parts.reduce((a, p) => a + p.length, 0));
    let o = 0;
    for (const p of parts) {
      out.set(p, o);
      o += p.length;
    }
    return out;
  };
  let offset = 0;
  const rows = [];
  const logits: number[] = [];
  for (const p of plans) {
    for (const r of p.rows) rows.push({ ...r, queryStart: r.queryStart + offset });
    for (const r of p.logitsIndices) logits.push(r + offset);
    offset += p.tokenIds.length;
  }
  return {
    tokenIds: cat((p) => p.tokenIds),
    positions: cat((p) => p.positions),
    slotMapping: cat((p) => p.slotMapping),
    rows,
    logitsIndices: Int32Array.from(logits),
  };
}

/** Row `i` of a `[rows][vocab]` logits array. */
export function row(logits: Float32Array, i: number, vocab: number): Float32Array {
  return logits.subarray(i * vocab, (i + 1) * vocab);
}
