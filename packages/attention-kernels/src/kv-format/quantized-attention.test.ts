// Each attention kernel in each quantized KV format against the f32 CPU reference, on keys with
// outlier channels (as real keys have). The accuracy reached is asserted here and stated in
// @kvasir/quantizer's README.

import { calibrateKv, compareTensors } from '@kvasir/quantizer';
import { randomFloats, seededRandom } from '@kvasir/test-utils';
import { afterAll, describe, expect, it } from 'vitest';
import { PagedDecodeAttention } from '../decode/paged-decode.js';
import { pagedDecodeAttentionCpu } from '../decode/paged-decode-reference.js';
import { kvCacheLayout } from '../layout.js';
import { PagedPrefillAttention } from '../prefill/paged-prefill.js';
import { pagedPrefillAttentionCpu } from '../prefill/paged-prefill-reference.js';
import { releaseTestGpu, testGpu } from '../testing/gpu.js';
import { FULL_MATRIX } from '../testing/matrix.js';
import { maxAbsDiff, randomBlockTables } from '../testing/random.js';
import { WriteKvCache } from '../write-kv-cache/write-kv-cache.js';
import { writeKvCacheReference } from '../write-kv-cache/write-kv-cache-reference.js';
import { f32Format } from './float.js';
import { fp8StaticKvFormat } from './fp8-static.js';
import { int4KvFormat } from './int4.js';
import { int4H32KvFormat } from './int4-h32.js';
import { fp8E4m3KvFormat, fp8E5m2KvFormat, int8KvFormat } from './int8-fp8.js';
import { int8H8KvFormat } from './int8-h8.js';
import type { KvFormat } from './types.js';

afterAll(releaseTestGpu);

const blockSize = 16;
const numKvHeads = 2;
const contextLens = [37, 70, 16];
const numBlocks = 12;
const totalTokens = contextLens.reduce((a, b) => a + b, 0);
const prefillLens = [5, 70, 3];
const prefillStarts = Uint32Array.from([0, 5, 75]);

const rng = seededRandom(2024);
const { blockTables, maxBlocksPerSeq } = randomBlockTables(rng, contextLens, blockSize, numBlocks);
/** Token i of sequence s goes to slot table[s][i / B] · B + i % B; rows are concatenated. */
const slots = new Int32Array(totalTokens);
{
  let r = 0;
  contextLens.forEach((len, s) => {
    for (let i = 0; i < len; i++) {
      slots[r++] =
        blockTables[s * maxBlocksPerSeq + Math.floor(i / blockSize)]! * blockSize + (i % blockSize);
    }
  });
}

/**
 * K/V, queries and their f32 references for one attention shape. Keys: every 16th channel has
 * 8× the spread and an offset of 8 (outlier channels).
 */
function attentionCase(numQHeads: number, headDim: number) {
  const key = randomFloats(seededRandom(7), totalTokens * numKvHeads * headDim, 1.5);
  for (let i = 0; i < key.length; i++) if (i % 16 === 5) key[i] = key[i]! * 8 + 8;
  const value = randomFloats(seededRandom(8), totalTokens * numKvHeads * headDim, 1.5);
  const config = (format: KvFormat) => ({ numQHeads, numKvHeads, headDim, blockSize, format });
  const cacheFor = (format: KvFormat): Uint32Array => {
    const layout = kvCacheLayout(config(format));
    const cache = new Uint32Array(numBlocks * layout.blockWords);
    writeKvCacheReference(layout, cache, key, value, slots);
    return cache;
  };
  const decodeQuery = randomFloats(seededRandom(9), contextLens.length * numQHeads * headDim, 1);
  const prefillQuery = randomFloats(seededRandom(10), 78 * numQHeads * headDim, 1);
  const decodeArgs = (cache: Uint32Array) => ({
    query: decodeQuery,
    kvCache: cache,
    blockTables,
    contextLens: Uint32Array.from(contextLens),
    numSeqs: contextLens.length,
    maxBlocksPerSeq,
  });
  const prefillArgs = (cache: Uint32Array) => ({
    query: prefillQuery,
    kvCache: cache,
    blockTables,
    queryStarts: prefillStarts,
    queryLens: Uint32Array.from(prefillLens),
    contextLens: Uint32Array.from(contextLens),
    numSeqs: contextLens.length,
    maxBlocksPerSeq,
  });
  const f32Cache = cacheFor(f32Format);
  return {
    key,
    value,
    config,
    cacheFor,
    decodeArgs,
    prefillArgs,
    decodeRef: pagedDecodeAttentionCpu(config(f32Format), decodeArgs(f32Cache)),
    prefillRef: pagedPrefillAttentionCpu(config(f32Format), prefillArgs(f32Cache)),
  };
}

/** GQA 8/2 at head dim 64: the shape the accuracy floors below were measured on. */
const accuracy = attentionCase(8, 64);
/**
 * The GPU kernels against the CPU on the same quantized cache. Their code depends on the shape
 * only through the constants compiled in, and the software adapter compiles a head dim 64
 * kernel of a rotated format for up to two minutes, so CI uses GQA 4/2 at head dim 32 (one int4
 * group and one 32-point rotation per row); KVASIR_FULL_MATRIX=1 runs the accuracy shape.
 */
const kernels = FULL_MATRIX ? accuracy : attentionCase(4, 32);

// Static fp8 scales calibrated from the K/V themselves (amax → 448), so they must reach the kernel.
const staticScales = calibrateKv('fp8-e4m3', accuracy.key, accuracy.value);

/**
 * Accuracy floors (attention-output cosine versus f32 K/V, decode and prefill), a little below
 * what these inputs reach: int8 0.99986, fp8-e4m3 0.99946, fp8-e5m2 0.9979, int4-g32 0.9907,
 * fp8-e4m3 static 0.9993, int8-h8 0.99995, int4-g32-h32 0.9928 (Hadamard-rotated).
 */
const CASES: { format: KvFormat; cosine: number }[] = [
  { format: int8KvFormat, cosine: 0.9995 },
  { format: fp8E4m3KvFormat, cosine: 0.998 },
  { format: fp8E5m2KvFormat, cosine: 0.995 },
  { format: int4KvFormat, cosine: 0.985 },
  { format: fp8StaticKvFormat('fp8-e4m3', staticScales), cosine: 0.998 },
  { format: int8H8KvFormat, cosine: 0.9999 },
  { format: int4H32KvFormat, cosine: 0.991 },
];

/** Writes the K/V through the GPU writer (quantizing on write), returning the cache buffer. */
async function gpuCache(format: KvFormat): Promise<GPUBuffer> {
  const gpu = await testGpu();
  const c = kernels.config(format);
  const kvCache = gpu.storageBuffer(numBlocks * kvCacheLayout(c).blockWords * 4);
  const writer = await WriteKvCache.create(gpu, c);
  await writer.run({
    key: gpu.storageBuffer(kernels.key),
    value: gpu.storageBuffer(kernels.value),
    slotMapping: gpu.storageBuffer(slots),
    kvCache,
    numTokens: totalTokens,
    slotMappingHost: slots,
  });
  return kvCache;
}

describe.each(CASES.map((c) => [c.format.name, c] as const))('%s attention', (_n, c) => {
  it(`CPU decode and prefill reach cosine ≥ ${c.cosine} against f32`, () => {
    const cache = accuracy.cacheFor(c.format);
    const cpuDecode = pagedDecodeAttentionCpu(
      accuracy.config(c.format),
      accuracy.decodeArgs(cache),
    );
    const cpuPrefill = pagedPrefillAttentionCpu(
      accuracy.config(c.format),
      accuracy.prefillArgs(cache),
    );
    expect(compareTensors(accuracy.decodeRef, cpuDecode).cosine).toBeGreaterThanOrEqual(c.cosine);
    expect(compareTensors(accuracy.prefillRef, cpuPrefill).cosine).toBeGreaterThanOrEqual(c.cosine);
  });

  // The split-K pass reads and rotates K/V with the same code as the single pass, each pass one
  // more compile on the software adapter: CI runs split-K on int8 (paged-decode.test.ts runs it
  // on f32 and f16), KVASIR_FULL_MATRIX=1 on every format.
  const splitK = FULL_MATRIX || c.format === int8KvFormat;
  it(`GPU decode (${splitK ? 'one split and split-K' : 'one split'}) matches the CPU on the same quantized cache`, async () => {
    const gpu = await testGpu();
    const cache = kernels.cacheFor(c.format);
    const cpu = pagedDecodeAttentionCpu(kernels.config(c.format), kernels.decodeArgs(cache));
    const kvCache = await gpuCache(c.format);
    const decode = await PagedDecodeAttention.create(gpu, kernels.config(c.format));
    for (const numSplits of splitK ? [1, 3] : [1]) {
      const out = await decode.run({ ...kernels.decodeArgs(cache), kvCache, numSplits });
      // Same dequantized K/V on both sides; only the f32 summation order differs.
      expect(maxAbsDiff(out, cpu)).toBeLessThan(2e-4);
      expect(compareTensors(kernels.decodeRef, out).cosine).toBeGreaterThanOrEqual(c.cosine);
    }
  });

  it('GPU prefill matches the CPU on the same quantized cache', async () => {
    const gpu = await testGpu();
    const cache = kernels.cacheFor(c.format);
    const cpu = pagedPrefillAttentionCpu(kernels.config(c.format), kernels.prefillArgs(cache));
    const kvCache = await gpuCache(c.format);
    const prefill = await PagedPrefillAttention.create(gpu, kernels.config(c.format));
    const out = await prefill.run({ ...kernels.prefillArgs(cache), kvCache });
    expect(maxAbsDiff(out, cpu)).toBeLessThan(2e-4);
    expect(compareTensors(kernels.prefillRef, out).cosine).toBeGreaterThanOrEqual(c.cosine);
  });
});
