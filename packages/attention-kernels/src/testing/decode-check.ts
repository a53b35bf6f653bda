import type { Gpu } from '@kvasir/gpu';
import { seededRandom } from '@kvasir/test-utils';
import { expect } from 'vitest';
import type { PagedDecodeAttention } from '../decode/paged-decode.js';
import { pagedDecodeAttentionCpu } from '../decode/paged-decode-reference.js';
import { type PagedFixture, randomQuery } from './paged-fixtures.js';
import { maxAbsDiff } from './random.js';

/**
 * GPU (f32 accumulation, exp2) vs CPU reference (f64): values are in [-1, 1), so outputs are
 * too, and the measured error stays below 1e-6 even at 2,500 tokens; the tolerance leaves margin.
 */
export const DECODE_GPU_TOL = 2e-5;

/**
 * Runs `kernel` on the fixture's batch with a query drawn from `seed` and expects it within
 * {@link DECODE_GPU_TOL} of the CPU reference; returns the GPU output.
 */
export async function checkDecode(
  gpu: Gpu,
  kernel: PagedDecodeAttention,
  fx: PagedFixture,
  seed: number,
  numSplits: number | 'auto' = 'auto',
): Promise<Float32Array> {
  const numSeqs = fx.contextLens.length;
  const query = randomQuery(seededRandom(seed), fx.config, numSeqs);
  const args = {
    query,
    blockTables: fx.blockTables,
    contextLens: fx.contextLens,
    numSeqs,
    maxBlocksPerSeq: fx.maxBlocksPerSeq,
  };
  const kvCache = gpu.storageBuffer(fx.cache);
  try {
    const got = await kernel.run({ ...args, kvCache, numSplits });
    const want = pagedDecodeAttentionCpu(fx.config, { ...args, kvCache: fx.cache });
    expect(maxAbsDiff(got, want)).toBeLessThan(DECODE_GPU_TOL);
    return got;
  } finally {
    gpu.releaseBuffer(kvCache);
  }
}
