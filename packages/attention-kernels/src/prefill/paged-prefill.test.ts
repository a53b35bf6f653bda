import { type Gpu, mesaVersion } from '@kvasir/gpu';
import { seededRandom } from '@kvasir/test-utils';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { f16Format, f32Format } from '../kv-format/float.js';
import { attentionErrorCode } from '../testing/errors.js';
import { releaseTestGpu, testGpu } from '../testing/gpu.js';
import { withFullMatrix } from '../testing/matrix.js';
import {
  pagedFixture,
  prefillBatchFixture,
  type AttentionShape as Shape,
} from '../testing/paged-fixtures.js';
import { maxAbsDiff } from '../testing/random.js';
import {
  autoPrefillKernel,
  PagedPrefillAttention,
  type PagedPrefillOptions,
} from './paged-prefill.js';
import { pagedPrefillAttentionCpu } from './paged-prefill-reference.js';

/** GPU (f32 accumulation, exp2) vs CPU reference (f64); measured errors are below 1e-6. */
const GPU_TOL = 2e-5;

afterAll(releaseTestGpu);

describe('PagedPrefillAttention vs CPU reference', () => {
  let gpu: Gpu;
  beforeAll(async () => {
    gpu = await testGpu();
  });

  // Each case on the smallest head dim that still shows it (the software adapter JIT-compiles
  // every shape's kernels, seconds each at head dim 128); KVASIR_FULL_MATRIX=1 adds the
  // serving-sized shapes.
  const cases = withFullMatrix<[string, Shape, number[], number[]]>(
    [
      [
        'GQA 4/2, f16, block 8, head dim 32: fresh prompt, chunked prefill and a prefix hit in one batch',
        { numQHeads: 4, numKvHeads: 2, headDim: 32, blockSize: 8, format: f16Format },
        [0, 37, 100],
        [20, 9, 1],
      ],
      [
        'MHA, f32, block 8, head dim 16: odd chunk sizes over partial blocks',
        { numQHeads: 3, numKvHeads: 3, headDim: 16, blockSize: 8, format: f32Format },
        [13, 0],
        [70, 5],
      ],
      [
        'MQA, f16, block 32, head dim 48 (chunks not a multiple of 4), soft-cap',
        { numQHeads: 4, numKvHeads: 1, headDim: 48, blockSize: 32, format: f16Format, softCap: 3 },
        [31, 2],
        [33, 1],
      ],
      [
        'GQA group 4, f16, block 8, head dim 32, sliding window 7: fresh prompts, a chunk and a prefix hit',
        { numQHeads: 8, numKvHeads: 2, headDim: 32, blockSize: 8, format: f16Format, window: 7 },
        [0, 37, 64],
        [20, 9, 1],
      ],
      [
        'GQA group 4, f16, block 8, head dim 32, sliding window 7, attention sinks: fresh prompts, a chunk and a prefix hit',
        {
          numQHeads: 8,
          numKvHeads: 2,
          headDim: 32,
          blockSize: 8,
          format: f16Format,
          window: 7,
          sinks: [-4, -3, -2, -1, 0, 1, 2, 3],
        },
        [0, 37, 64],
        [20, 9, 1],
      ],
      [
        'GQA group 3, f32, block 16, head dim 16: a chunk after a 2,000-token prefix',
        { numQHeads: 6, numKvHeads: 2, headDim: 16, blockSize: 16, format: f32Format },
        [2000],
        [24],
      ],
    ],
    [
      [
        'GQA 8/2, f16, head dim 128: fresh prompt, chunked prefill and a prefix hit in one batch',
        { numQHeads: 8, numKvHeads: 2, headDim: 128, blockSize: 16, format: f16Format },
        [0, 37, 100],
        [20, 9, 1],
      ],
      [
        'MHA, f32, block 8, head dim 64: odd chunk sizes over partial blocks',
        { numQHeads: 3, numKvHeads: 3, headDim: 64, blockSize: 8, format: f32Format },
        [13, 0],
        [70, 5],
      ],
      [
        'MQA, f16, block 32, head dim 80, soft-cap',
        { numQHeads: 4, numKvHeads: 1, headDim: 80, blockSize: 32, format: f16Format, softCap: 3 },
        [31, 2],
        [33, 1],
      ],
      [
        'GQA 4/2, f16, head dim 32 (a small model): a chunk after a prefix and a fresh prompt',
        { numQHeads: 4, numKvHeads: 2, headDim: 32, blockSize: 8, format: f16Format },
        [50, 0],
        [9, 20],
      ],
      [
        'GQA group 3, f32, block 16, head dim 96: a chunk after a 2,000-token prefix',
        { numQHeads: 6, numKvHeads: 2, headDim: 96, blockSize: 16, format: f32Format },
        [2000],
        [24],
      ],
    ],
  );
  for (const [name, shape, pasts, queryLens] of cases) {
    it(`${name} (software and tiled kernels)`, async () => {
      const rng = seededRandom(pasts.length * 17 + shape.headDim);
      const { fx, args } = prefillBatchFixture(rng, { ...shape, spareBlocks: 5 }, pasts, queryLens);
      const want = pagedPrefillAttentionCpu(fx.config, { ...args, kvCache: fx.cache });
      const kvCache = gpu.storageBuffer(fx.cache);
      for (const kind of ['software', 'tiled'] as const) {
        const kernel = await PagedPrefillAttention.create(gpu, fx.config, { kernel: kind });
        expect(kernel.kernel).toBe(kind);
        const got = await kernel.run({ ...args, kvCache });
        expect(maxAbsDiff(got, want)).toBeLessThan(GPU_TOL);
      }
      gpu.releaseBuffer(kvCache);
    });
  }

  it('picks its kernel by adapter and Mesa version, and refuses an unknown kernel', async () => {
    const config = { numQHeads: 4, numKvHeads: 2, headDim: 64, blockSize: 8, format: f32Format };
    const auto = (await PagedPrefillAttention.create(gpu, config)).kernel;
    expect(auto).toBe(autoPrefillKernel(gpu));
    if (gpu.isSoftware && (mesaVersion(gpu.adapterInfo)?.[0] ?? 0) < 25)
      expect(auto).toBe('software');
    const adapter = (isSoftware: boolean, description: string) => ({
      isSoftware,
      adapterInfo: { vendor: '', architecture: '', device: 'llvmpipe', description },
    });
    expect(autoPrefillKernel(adapter(true, 'OpenGL ES 3.2 Mesa 22.3.6'))).toBe('software');
    expect(autoPrefillKernel(adapter(true, 'OpenGL ES 3.2 Mesa 24.2.8'))).toBe('software');
    expect(autoPrefillKernel(adapter(true, 'OpenGL ES 3.2 Mesa 25.0.7-2~bpo12+1'))).toBe('tiled');
    expect(autoPrefillKernel(adapter(true, 'SwiftShader'))).toBe('software');
    expect(autoPrefillKernel(adapter(false, 'NVIDIA 580.159'))).toBe('tiled');
    const bogus = { kernel: 'hardware' } as unknown as PagedPrefillOptions;
    expect(await attentionErrorCode(() => PagedPrefillAttention.create(gpu, config, bogus))).toBe(
      'INVALID_ARGUMENT',
    );
  });
});

describe('PagedPrefillAttention tunings', () => {
  it('the tiled kernel with queries in workgroup memory and 2 V chunks per lane (the hardware default) matches the reference', async () => {
    const gpu = await testGpu();
    for (const headDim of withFullMatrix([32], [64])) {
      const shape = { numQHeads: 8, numKvHeads: 2, headDim, blockSize: 16, format: f16Format };
      const { fx, args } = prefillBatchFixture(
        seededRandom(12),
        { ...shape, spareBlocks: 3 },
        [40, 0],
        [9, 17],
      );
      const kernel = await PagedPrefillAttention.create(gpu, fx.config, {
        kernel: 'tiled',
        queryInRegisters: false,
        vChunksPerLane: 2,
      });
      const kvCache = gpu.storageBuffer(fx.cache);
      const got = await kernel.run({ ...args, kvCache });
      gpu.releaseBuffer(kvCache);
      const want = pagedPrefillAttentionCpu(fx.config, { ...args, kvCache: fx.cache });
      expect(maxAbsDiff(got, want)).toBeLessThan(GPU_TOL);
    }
  });
});

describe('PagedPrefillAttention input checks', () => {
  const config = { numQHeads: 4, numKvHeads: 2, headDim: 64, blockSize: 8, format: f32Format };
  const code = attentionErrorCode;

  it('refuses bad batches and buffers before dispatching', async () => {
    const gpu = await testGpu();
    expect(await code(() => PagedPrefillAttention.create(gpu, { ...config, headDim: 256 }))).toBe(
      'UNSUPPORTED_HEAD_DIM',
    );
    const kernel = await PagedPrefillAttention.create(gpu, config);
    const fx = pagedFixture(seededRandom(8), { ...config, contextLens: [10, 20] });
    const batch = {
      blockTables: fx.blockTables,
      queryStarts: Uint32Array.of(0, 4),
      queryLens: Uint32Array.of(4, 6),
      contextLens: fx.contextLens,
      numSeqs: 2,
      maxBlocksPerSeq: fx.maxBlocksPerSeq,
      numTokens: 10,
    };
    expect(await code(() => kernel.plan({ ...batch, queryLens: Uint32Array.of(4, 21) }))).toBe(
      'INVALID_ARGUMENT',
    );
    expect(await code(() => kernel.plan({ ...batch, queryStarts: Uint32Array.of(0, 5) }))).toBe(
      'SHAPE_MISMATCH',
    );
    const blockTables = fx.blockTables.slice();
    blockTables[1] = 1_000_000;
    const plan = kernel.plan({ ...batch, blockTables });
    const kvCache = gpu.storageBuffer(fx.cache);
    const rows = gpu.storageBuffer(10 * 4 * 64 * 4);
    expect(
      await code(() =>
        kernel.encode(gpu.createEncoder(), { plan, query: rows, output: rows, kvCache }),
      ),
    ).toBe('BLOCK_OUT_OF_RANGE');
    plan.release();
    const good = kernel.plan(batch);
    expect(
      await code(() =>
        kernel.encode(gpu.createEncoder(), {
          plan: good,
          query: gpu.storageBuffer(64),
          output: rows,
          kvCache,
        }),
      ),
    ).toBe('SHAPE_MISMATCH');
    good.release();
  });
});
