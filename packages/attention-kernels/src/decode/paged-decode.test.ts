import type { Gpu } from '@kvasir/gpu';
import { seededRandom } from '@kvasir/test-utils';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { f16Format, f32Format } from '../kv-format/float.js';
import { kvFormat } from '../kv-format/registry.js';
import { checkDecode, DECODE_GPU_TOL } from '../testing/decode-check.js';
import { attentionErrorCode } from '../testing/errors.js';
import { releaseTestGpu, testGpu } from '../testing/gpu.js';
import { FULL_MATRIX, withFullMatrix } from '../testing/matrix.js';
import { pagedFixture, type AttentionShape as Shape } from '../testing/paged-fixtures.js';
import { maxAbsDiff } from '../testing/random.js';
import {
  chooseDecodeSplits,
  PagedDecodeAttention,
  type PagedDecodeOptions,
} from './paged-decode.js';

afterAll(releaseTestGpu);

describe('PagedDecodeAttention vs CPU reference', () => {
  let gpu: Gpu;
  beforeAll(async () => {
    gpu = await testGpu();
  });

  // Each case on the smallest shape that still shows it: the software adapter JIT-compiles each
  // shape's kernels (the unrolled code grows with head dim × heads per workgroup), and
  // KVASIR_FULL_MATRIX=1 adds the serving-sized shapes.
  const cases = withFullMatrix<[string, Shape, number[]]>(
    [
      [
        'MHA, f32, block 8, partial last blocks, context 1',
        { numQHeads: 4, numKvHeads: 4, headDim: 64, blockSize: 8, format: f32Format },
        [1, 7, 8, 9, 130],
      ],
      [
        'MQA, f16, block 32, head dim 48 (chunks not a multiple of 4)',
        { numQHeads: 4, numKvHeads: 1, headDim: 48, blockSize: 32, format: f16Format },
        [5, 64, 65],
      ],
      [
        'GQA group 3, f32, block 16, head dim 32, soft-cap',
        { numQHeads: 6, numKvHeads: 2, headDim: 32, blockSize: 16, format: f32Format, softCap: 5 },
        [3, 100],
      ],
      [
        'MHA with 12 KV heads (two software-kernel workgroups per sequence, 4 idle lanes), f16',
        { numQHeads: 12, numKvHeads: 12, headDim: 32, blockSize: 16, format: f16Format },
        [2, 45, 130],
      ],
      [
        'MQA group 16 (two head chunks per KV head), f16, block 16, head dim 16',
        { numQHeads: 16, numKvHeads: 1, headDim: 16, blockSize: 16, format: f16Format },
        [40, 17],
      ],
    ],
    [
      [
        'MQA, f16, block 32, head dim 80',
        { numQHeads: 8, numKvHeads: 1, headDim: 80, blockSize: 32, format: f16Format },
        [5, 64, 65],
      ],
      [
        'GQA group 3, f32, block 16, head dim 96, soft-cap',
        {
          numQHeads: 12,
          numKvHeads: 4,
          headDim: 96,
          blockSize: 16,
          format: f32Format,
          softCap: 5,
        },
        [3, 100],
      ],
      [
        'MQA group 16 (two head chunks per KV head), f16, block 16, head dim 64',
        { numQHeads: 16, numKvHeads: 1, headDim: 64, blockSize: 16, format: f16Format },
        [40, 17],
      ],
    ],
  );
  for (const [name, shape, lens] of cases) {
    it(name, async () => {
      const fx = pagedFixture(seededRandom(lens.length * 31 + shape.headDim), {
        ...shape,
        contextLens: lens,
        spareBlocks: 7,
      });
      const kernel = await PagedDecodeAttention.create(gpu, fx.config);
      await checkDecode(gpu, kernel, fx, 1);
    });
  }

  it('GQA 8/2, f16, sliding window 100, software, tiled and hardware kernels: split-K on and off give the reference over contexts up to 900 (whole splits before the window)', async () => {
    const fx = pagedFixture(seededRandom(98), {
      numQHeads: 8,
      numKvHeads: 2,
      headDim: 64,
      blockSize: 16,
      format: f16Format,
      window: 100,
      contextLens: [1, 99, 100, 101, 900],
    });
    let whole: Float32Array | undefined;
    for (const kind of ['software', 'tiled', 'hardware'] as const) {
      const kernel = await PagedDecodeAttention.create(gpu, fx.config, { kernel: kind });
      expect(kernel.kernel).toBe(kind);
      whole = await checkDecode(gpu, kernel, fx, 3, 1);
      const split = await checkDecode(gpu, kernel, fx, 3, 4);
      expect(maxAbsDiff(whole, split)).toBeLessThan(DECODE_GPU_TOL);
    }
    // Without the window the longer sequences attend elsewhere.
    const { window: _, ...fullConfig } = fx.config;
    const fullKernel = await PagedDecodeAttention.create(gpu, fullConfig);
    const wide = await checkDecode(gpu, fullKernel, { ...fx, config: fullConfig }, 3, 1);
    expect(maxAbsDiff(wide, whole as Float32Array)).toBeGreaterThan(1e-3);
  });

  it('GQA 8/2, f16, attention sinks (one logit per head, -4 to 4), with a window of 100 and without, software, tiled and hardware kernels: split-K on and off give the reference; without the sinks they do not', async () => {
    const sinks = Array.from({ length: 8 }, (_, h) => -4 + h);
    for (const window of [undefined, 100]) {
      const fx = pagedFixture(seededRandom(97), {
        numQHeads: 8,
        numKvHeads: 2,
        headDim: 64,
        blockSize: 16,
        format: f16Format,
        ...(window === undefined ? {} : { window }),
        sinks,
        contextLens: [1, 99, 100, 101, 900],
      });
      let whole: Float32Array | undefined;
      for (const kind of ['software', 'tiled', 'hardware'] as const) {
        const kernel = await PagedDecodeAttention.create(gpu, fx.config, { kernel: kind });
        whole = await checkDecode(gpu, kernel, fx, 3, 1);
        const split = await checkDecode(gpu, kernel, fx, 3, 4);
        expect(maxAbsDiff(whole, split)).toBeLessThan(DECODE_GPU_TOL);
      }
      const { sinks: _, ...plain } = fx.config;
      const plainKernel = await PagedDecodeAttention.create(gpu, plain);
      const without = await checkDecode(gpu, plainKernel, { ...fx, config: plain }, 3, 1);
      expect(maxAbsDiff(without, whole as Float32Array)).toBeGreaterThan(1e-3);
    }
  });

  for (const [numQHeads, headDim] of withFullMatrix<readonly [number, number]>(
    [[4, 32]],
    [[8, 128]],
  )) {
    it(`GQA ${numQHeads}/2, f16, head dim ${headDim}: split-K on and off agree over a 2,500-token context`, async () => {
      const fx = pagedFixture(seededRandom(99), {
        numQHeads,
        numKvHeads: 2,
        headDim,
        blockSize: 16,
        format: f16Format,
        contextLens: [1, 33, 300, 2500],
      });
      const kernel = await PagedDecodeAttention.create(gpu, fx.config);
      const whole = await checkDecode(gpu, kernel, fx, 2, 1);
      const split = await checkDecode(gpu, kernel, fx, 2, 5);
      // Same math in another order: the two paths agree to f32 rounding.
      expect(maxAbsDiff(whole, split)).toBeLessThan(DECODE_GPU_TOL);
      const plan = kernel.plan({
        blockTables: fx.blockTables,
        contextLens: fx.contextLens,
        numSeqs: 4,
        maxBlocksPerSeq: fx.maxBlocksPerSeq,
        numSplits: 5,
      });
      expect(plan.numSplits).toBe(5);
      expect(plan.chunkTokens % 64).toBe(0);
      plan.release();
    });
  }

  it('the tiled kernel under both code-generation tunings (queries in registers or workgroup memory, 2 or 4 V chunks per lane) matches the reference', async () => {
    const fx = pagedFixture(seededRandom(41), {
      numQHeads: FULL_MATRIX ? 8 : 4,
      numKvHeads: 2,
      headDim: FULL_MATRIX ? 96 : 32,
      blockSize: 16,
      format: f16Format,
      contextLens: [3, 130],
    });
    const outs: Float32Array[] = [];
    for (const tuning of [
      { queryInRegisters: true, vChunksPerLane: 2 },
      { queryInRegisters: false, vChunksPerLane: 2 },
      { queryInRegisters: false, vChunksPerLane: 4 },
    ] as const) {
      const kernel = await PagedDecodeAttention.create(gpu, fx.config, {
        ...tuning,
        kernel: 'tiled',
      });
      expect(kernel.kernel).toBe('tiled');
      outs.push(await checkDecode(gpu, kernel, fx, 3, 2));
    }
    expect(maxAbsDiff(outs[0]!, outs[1]!)).toBeLessThan(DECODE_GPU_TOL);
    expect(
      await attentionErrorCode(() =>
        PagedDecodeAttention.create(gpu, { ...fx.config, headDim: 80 }, { vChunksPerLane: 4 }),
      ),
    ).toBe('INVALID_ARGUMENT');
  });

  describe('the hardware-shaped kernel (forced on this adapter)', () => {
    // Sub-chunks are 256 keys whatever the head dim; the key subsets (256 / (head dim / 8))
    // and the heads that fit the workgroup memory depend on it.
    const hwCases = withFullMatrix<[string, Shape, number[]]>(
      [
        [
          'GQA 4/2, f16, d32: sub-chunk edges 1, 255, 256, 257 and 600 tokens',
          { numQHeads: 4, numKvHeads: 2, headDim: 32, blockSize: 16, format: f16Format },
          [1, 255, 256, 257, 600],
        ],
        [
          'MQA group 8 (4 heads fit the workgroup memory), f32, d48, block 32, soft-cap (42 key subsets, a ragged merge tree)',
          {
            numQHeads: 8,
            numKvHeads: 1,
            headDim: 48,
            blockSize: 32,
            format: f32Format,
            softCap: 4,
          },
          [70, 300],
        ],
        [
          'MHA, int8, d32, block 8',
          { numQHeads: 3, numKvHeads: 3, headDim: 32, blockSize: 8, format: kvFormat('int8') },
          [9, 513],
        ],
      ],
      [
        [
          'GQA 8/2, f16, d128: sub-chunk edges 1, 255, 256, 257 and 600 tokens',
          { numQHeads: 8, numKvHeads: 2, headDim: 128, blockSize: 16, format: f16Format },
          [1, 255, 256, 257, 600],
        ],
        [
          'MQA group 8, f32, d80, block 32, soft-cap (25 key subsets, a ragged merge tree)',
          {
            numQHeads: 8,
            numKvHeads: 1,
            headDim: 80,
            blockSize: 32,
            format: f32Format,
            softCap: 4,
          },
          [70, 300],
        ],
        [
          'MHA, int8, d96, block 8',
          { numQHeads: 3, numKvHeads: 3, headDim: 96, blockSize: 8, format: kvFormat('int8') },
          [9, 513],
        ],
      ],
    );
    for (const [name, shape, lens] of hwCases) {
      it(name, async () => {
        const fx = pagedFixture(seededRandom(lens.length * 13 + shape.headDim), {
          ...shape,
          contextLens: lens,
          spareBlocks: 5,
        });
        const kernel = await PagedDecodeAttention.create(gpu, fx.config, { kernel: 'hardware' });
        expect(kernel.kernel).toBe('hardware');
        const whole = await checkDecode(gpu, kernel, fx, 4, 1);
        const split = await checkDecode(gpu, kernel, fx, 4, 3);
        expect(maxAbsDiff(whole, split)).toBeLessThan(DECODE_GPU_TOL);
      });
    }
  });

  const smallDims = withFullMatrix<readonly [number, number, number]>(
    [
      [16, 4, 1],
      [48, 6, 3],
    ],
    [
      [32, 8, 2],
      [112, 4, 4],
    ],
  );
  it(`small head dims (${smallDims.map((d) => d[0]).join(', ')}): every kernel, split-K on and off`, async () => {
    for (const [headDim, numQHeads, numKvHeads] of smallDims) {
      const fx = pagedFixture(seededRandom(headDim), {
        numQHeads,
        numKvHeads,
        headDim,
        blockSize: 16,
        format: f16Format,
        contextLens: [1, 70, 300],
      });
      for (const kernel of ['software', 'tiled', 'hardware'] as const) {
        const k = await PagedDecodeAttention.create(gpu, fx.config, { kernel });
        await checkDecode(gpu, k, fx, headDim, 1);
        await checkDecode(gpu, k, fx, headDim, 2);
      }
    }
  });

  it('a quantized format plugs in unchanged: an int8 cache matches the reference', async () => {
    for (const name of ['int8']) {
      const fx = pagedFixture(seededRandom(61), {
        numQHeads: FULL_MATRIX ? 8 : 4,
        numKvHeads: 2,
        headDim: FULL_MATRIX ? 128 : 32,
        blockSize: 16,
        format: kvFormat(name),
        contextLens: [70, 9],
      });
      const kernel = await PagedDecodeAttention.create(gpu, fx.config);
      await checkDecode(gpu, kernel, fx, 6);
    }
  });

  it('random contexts and block tables match the reference (property)', async () => {
    const config = {
      numQHeads: 4,
      numKvHeads: 2,
      headDim: FULL_MATRIX ? 64 : 32,
      blockSize: 8,
      format: f16Format,
    };
    const kernel = await PagedDecodeAttention.create(gpu, config);
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          seed: fc.integer({ min: 0, max: 1e9 }),
          lens: fc.array(fc.integer({ min: 1, max: 200 }), { minLength: 1, maxLength: 4 }),
          splits: fc.constantFrom<number | 'auto'>(1, 2, 3, 'auto'),
        }),
        async ({ seed, lens, splits }) => {
          const fx = pagedFixture(seededRandom(seed), { ...config, contextLens: lens });
          await checkDecode(gpu, kernel, fx, seed, splits);
        },
      ),
      { numRuns: 6, seed: 424242 },
    );
  });
});

describe('PagedDecodeAttention input checks', () => {
  const config = { numQHeads: 4, numKvHeads: 2, headDim: 64, blockSize: 8, format: f32Format };
  const code = attentionErrorCode;

  it('refuses bad configurations at creation', async () => {
    const gpu = await testGpu();
    expect(await code(() => PagedDecodeAttention.create(gpu, { ...config, headDim: 40 }))).toBe(
      'UNSUPPORTED_HEAD_DIM',
    );
    expect(await code(() => PagedDecodeAttention.create(gpu, { ...config, numQHeads: 5 }))).toBe(
      'INVALID_ARGUMENT',
    );
    expect(await code(() => PagedDecodeAttention.create(gpu, { ...config, softCap: 0 }))).toBe(
      'INVALID_ARGUMENT',
    );
    const bogus = { kernel: 'lanes' } as unknown as PagedDecodeOptions;
    expect(await code(() => PagedDecodeAttention.create(gpu, config, bogus))).toBe(
      'INVALID_ARGUMENT',
    );
    const unpack = { f16Unpack: 'fast' } as unknown as PagedDecodeOptions;
    expect(await code(() => PagedDecodeAttention.create(gpu, config, unpack))).toBe(
      'INVALID_ARGUMENT',
    );
  });

  it('refuses sinks that are not one finite logit per query head; shares plans only with a kernel of the same geometry', async () => {
    const gpu = await testGpu();
    expect(await code(() => PagedDecodeAttention.create(gpu, { ...config, sinks: [1, 2] }))).toBe(
      'INVALID_ARGUMENT',
    );
    expect(
      await code(() =>
        PagedDecodeAttention.create(gpu, { ...config, sinks: [0, 1, Number.NaN, 2] }),
      ),
    ).toBe('INVALID_ARGUMENT');
    const base = await PagedDecodeAttention.create(gpu, config);
    const sinks = await PagedDecodeAttention.create(
      gpu,
      { ...config, sinks: [0, 1, 2, 3] },
      { kernel: base.kernel },
    );
    sinks.acceptPlansOf(base);
    expect(sinks.plansOf).toBe(base);
    const windowed = await PagedDecodeAttention.create(
      gpu,
      { ...config, window: 8 },
      { kernel: base.kernel },
    );
    expect(await code(() => windowed.acceptPlansOf(base))).toBe('INVALID_ARGUMENT');
  });

  it("refuses the subgroup kernel, naming what is missing, on an adapter without 'subgroups'", async () => {
    const gpu = await testGpu();
    expect(gpu.features.has('subgroups')).toBe(false);
    expect(gpu.adapterInfo.subgroupMinSize).toBeUndefined();
    const create = () => PagedDecodeAttention.create(gpu, config, { kernel: 'subgroup' });
    expect(await code(create)).toBe('DEVICE_LIMIT');
    await expect(create()).rejects.toThrow("'subgroups' feature");
  });

  it('picks the software-shaped kernel on a software adapter', async () => {
    const gpu = await testGpu();
    expect(gpu.isSoftware).toBe(true);
    const kernel = await PagedDecodeAttention.create(gpu, config);
    expect(kernel.kernel).toBe('software');
    // One workgroup (8 lanes) covers both KV heads of a sequence.
    expect(kernel.workgroupsPerSeq).toBe(1);
    const tiled = await PagedDecodeAttention.create(gpu, config, { kernel: 'tiled' });
    expect(tiled.workgroupsPerSeq).toBe(2);
  });

  it('refuses bad batches and buffers before dispatching', async () => {
    const gpu = await testGpu();
    const kernel = await PagedDecodeAttention.create(gpu, config);
    const fx = pagedFixture(seededRandom(4), { ...config, contextLens: [10, 20] });
    const batch = {
      blockTables: fx.blockTables,
      contextLens: fx.contextLens,
      numSeqs: 2,
      maxBlocksPerSeq: fx.maxBlocksPerSeq,
    };
    expect(await code(() => kernel.plan({ ...batch, contextLens: Uint32Array.of(10) }))).toBe(
      'SHAPE_MISMATCH',
    );
    expect(
      await code(() =>
        kernel.plan({ ...batch, contextLens: Uint32Array.of(10, 8 * fx.maxBlocksPerSeq + 1) }),
      ),
    ).toBe('CONTEXT_TOO_LONG');
    expect(await code(() => kernel.plan({ ...batch, numSplits: 0 }))).toBe('INVALID_ARGUMENT');

    const plan = kernel.plan(batch);
    const query = gpu.storageBuffer(2 * 4 * 64 * 4);
    const output = gpu.storageBuffer(2 * 4 * 64 * 4);
    // A cache one block short of the largest id in the tables.
    const small = gpu.storageBuffer(plan.maxBlockId * fx.layout.bytesPerBlock);
    const encoder = gpu.createEncoder();
    expect(await code(() => kernel.encode(encoder, { plan, query, output, kvCache: small }))).toBe(
      'BLOCK_OUT_OF_RANGE',
    );
    const kvCache = gpu.storageBuffer(fx.cache);
    expect(
      await code(() =>
        kernel.encode(encoder, { plan, query: gpu.storageBuffer(16), output, kvCache }),
      ),
    ).toBe('SHAPE_MISMATCH');
    plan.release();
    expect(await code(() => kernel.encode(encoder, { plan, query, output, kvCache }))).toBe(
      'INVALID_ARGUMENT',
    );
    expect(await code(() => kernel.run({ ...batch, query: new Float32Array(3), kvCache }))).toBe(
      'SHAPE_MISMATCH',
    );
  });
});

describe('chooseDecodeSplits', () => {
  it('keeps one split when the batch already fills the device', () => {
    expect(chooseDecodeSplits(Uint32Array.of(4096, 4096), 8, 16, 'auto').numSplits).toBe(1);
  });
  it('splits a few long sequences until the target is reached', () => {
    const { chunkTokens, numSplits } = chooseDecodeSplits(Uint32Array.of(16384), 8, 64, 'auto');
    expect(numSplits).toBeGreaterThanOrEqual(8);
    expect(Math.ceil(16384 / chunkTokens)).toBe(numSplits);
    expect(chunkTokens % 64).toBe(0);
  });
  it('never splits below 256 tokens per split automatically', () => {
    const { chunkTokens } = chooseDecodeSplits(Uint32Array.of(1000), 1, 10_000, 'auto');
    expect(chunkTokens).toBeGreaterThanOrEqual(256);
  });
  it('honours a forced count', () => {
    expect(chooseDecodeSplits(Uint32Array.of(1000, 10), 100, 1, 4).numSplits).toBe(4);
    expect(chooseDecodeSplits(Uint32Array.of(1000), 100, 1, 1).numSplits).toBe(1);
  });
});
