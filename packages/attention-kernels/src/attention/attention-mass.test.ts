import { seededRandom } from '@kvasir/test-utils';
import { afterAll, describe, expect, it } from 'vitest';
import { f16Format, f32Format } from '../kv-format/float.js';
import { int4H32KvFormat } from '../kv-format/int4-h32.js';
import { int8KvFormat } from '../kv-format/int8-fp8.js';
import type { KvFormat } from '../kv-format/types.js';
import { pagedPrefillAttentionCpu } from '../prefill/paged-prefill-reference.js';
import { releaseTestGpu, testGpu } from '../testing/gpu.js';
import { prefillBatchFixture } from '../testing/paged-fixtures.js';
import { maxAbsDiff } from '../testing/random.js';
import { PagedAttentionMass } from './attention-mass.js';

afterAll(releaseTestGpu);

/**
 * GPU (f32, exp) vs the CPU reference (f64), relative to the largest entry: per-block sums of
 * up to heads × queries probabilities (128 here, where one f32 ulp is 1.5e-5).
 */
const MASS_TOL = 2e-6;

const CASES: readonly {
  name: string;
  heads: [number, number];
  headDim?: number;
  blockSize: number;
  format: KvFormat;
  pasts: number[];
  queryLens: number[];
  massQueries: number[];
  softCap?: number;
}[] = [
  {
    name: 'MHA, decode rows, f16, B=16',
    heads: [4, 4],
    blockSize: 16,
    format: f16Format,
    pasts: [40, 0, 15],
    queryLens: [1, 1, 1],
    massQueries: [1, 1, 0],
  },
  {
    name: 'GQA, prefill chunks with observation windows, int8, B=8',
    heads: [8, 2],
    blockSize: 8,
    format: int8KvFormat,
    pasts: [0, 21, 9],
    queryLens: [19, 6, 3],
    massQueries: [16, 2, 3],
  },
  {
    name: 'MQA, f32, B=8, soft cap',
    heads: [4, 1],
    blockSize: 8,
    format: f32Format,
    pasts: [70, 3],
    queryLens: [2, 5],
    massQueries: [2, 5],
    softCap: 3,
  },
  {
    // A first version summed each block's every mass query and head in one invocation, and
    // llvmpipe cut those invocations short here (a third of the mass arrived).
    name: 'GQA 32/8 d128, a 77-query window over 577 tokens beside a decode, f16, B=16',
    heads: [32, 8],
    headDim: 128,
    blockSize: 16,
    format: f16Format,
    pasts: [500, 1999],
    queryLens: [77, 1],
    massQueries: [77, 1],
  },
  {
    name: 'GQA, rotated int4, B=16',
    heads: [4, 2],
    blockSize: 16,
    format: int4H32KvFormat,
    pasts: [33],
    queryLens: [4],
    massQueries: [4],
  },
];

describe('PagedAttentionMass on the GPU vs the CPU references', () => {
  for (const c of CASES) {
    it(c.name, async () => {
      const gpu = await testGpu();
      const shape = {
        numQHeads: c.heads[0],
        numKvHeads: c.heads[1],
        headDim: c.headDim ?? 32,
        blockSize: c.blockSize,
        format: c.format,
        ...(c.softCap === undefined ? {} : { softCap: c.softCap }),
      };
      const { fx, args } = prefillBatchFixture(seededRandom(3), shape, c.pasts, c.queryLens);
      const massQueries = Uint32Array.from(c.massQueries);
      const want = new Float32Array(c.pasts.length * fx.maxBlocksPerSeq);
      pagedPrefillAttentionCpu(fx.config, {
        ...args,
        kvCache: fx.cache,
        massQueries,
        massOut: want,
      });
      const kernel = await PagedAttentionMass.create(gpu, fx.config);
      const kvCache = gpu.storageBuffer(fx.cache);
      const numTokens = c.queryLens.reduce((a, b) => a + b, 0);
      const got = await kernel.run({ ...args, kvCache, massQueries, numTokens });
      gpu.releaseBuffer(kvCache);
      const largest = Math.max(1, ...want);
      expect(maxAbsDiff(got, want) / largest).toBeLessThan(MASS_TOL);
      // Each asking row's mass is heads × its mass queries; the others stay zero.
      c.massQueries.forEach((m, s) => {
        const row = got.subarray(s * fx.maxBlocksPerSeq, (s + 1) * fx.maxBlocksPerSeq);
        const sum = row.reduce((a, b) => a + b, 0);
        expect(Math.abs(sum - c.heads[0] * m)).toBeLessThan(1e-3);
      });
    });
  }

  it('adds into massOut (layers accumulate) and refuses plans that ask for nothing', async () => {
    const gpu = await testGpu();
    const shape = { numQHeads: 2, numKvHeads: 1, headDim: 16, blockSize: 8, format: f16Format };
    const { fx, args } = prefillBatchFixture(seededRandom(4), shape, [12], [1]);
    const kernel = await PagedAttentionMass.create(gpu, fx.config);
    const batch = { ...args, massQueries: Uint32Array.of(1), numTokens: 1 };
    const plan = kernel.plan(batch);
    const kvCache = gpu.storageBuffer(fx.cache);
    const query = gpu.storageBuffer(args.query);
    const massOut = gpu.storageBuffer(Float32Array.of(1, 1));
    await gpu.run((e) => {
      kernel.encode(e, { plan, query, kvCache, massOut });
      kernel.encode(e, { plan, query, kvCache, massOut });
    });
    const got = new Float32Array(await gpu.readBuffer(massOut));
    expect(got[0]! + got[1]! - 2).toBeCloseTo(2 * 2, 4);
    plan.release();
    expect(() => kernel.encode(gpu.createEncoder(), { plan, query, kvCache, massOut })).toThrow(
      /released/,
    );
    expect(() => kernel.plan({ ...batch, massQueries: Uint32Array.of(0) })).toThrow(
      /no sequence asks for attention mass/,
    );
    expect(() => kernel.plan({ ...batch, massQueries: Uint32Array.of(2) })).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
    );
    for (const b of [kvCache, query, massOut]) gpu.releaseBuffer(b);
  });

  it('refuses a batch whose per-block sums exceed one storage binding', async () => {
    const gpu = await testGpu();
    const config = { numQHeads: 32, numKvHeads: 8, headDim: 16, blockSize: 8, format: f16Format };
    const kernel = await PagedAttentionMass.create(gpu, config);
    // One row of 32 heads over a table padded past a binding's worth of floats.
    const maxBlocksPerSeq = Math.ceil(gpu.limits.maxStorageBufferBindingSize / (32 * 4)) + 1;
    expect(() =>
      kernel.plan({
        blockTables: new Uint32Array(maxBlocksPerSeq),
        queryStarts: Uint32Array.of(0),
        queryLens: Uint32Array.of(1),
        contextLens: Uint32Array.of(5),
        massQueries: Uint32Array.of(1),
        numSeqs: 1,
        maxBlocksPerSeq,
        numTokens: 1,
      }),
    ).toThrow(expect.objectContaining({ code: 'DEVICE_LIMIT' }));
  });
});
