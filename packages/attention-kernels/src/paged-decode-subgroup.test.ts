import type { Gpu } from '@kvasir/gpu';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { f16Format, f32Format, kvFormat } from './kv-format.js';
import { PagedDecodeAttention, type PagedDecodeOptions } from './paged-decode.js';
import { type AttentionShape, pagedFixture } from './paged-decode-fixtures.js';
import { subgroupLanesPerRow } from './paged-decode-sg.wgsl.js';
import { checkDecode } from './testing/decode-check.js';
import { attentionErrorCode } from './testing/errors.js';
import { lavapipeGpu } from './testing/lavapipe.js';
import { seededRng } from './testing/random.js';

/** lavapipe (Mesa 25) compiles these kernels slowly the first time: up to a minute or two each. */
const COMPILE_TIMEOUT = 300_000;

describe('subgroup decode kernel on lavapipe (subgroups feature) vs CPU reference', () => {
  let gpu: Gpu;
  beforeAll(async () => {
    gpu = await lavapipeGpu();
  }, COMPILE_TIMEOUT);
  afterAll(() => gpu?.destroy());

  it('opens lavapipe at the core level with subgroups and reports their sizes', () => {
    expect(gpu.backend).toBe('vulkan');
    expect(gpu.featureLevel).toBe('core');
    expect(gpu.features.has('subgroups')).toBe(true);
    const { subgroupMinSize: min, subgroupMaxSize: max } = gpu.adapterInfo;
    expect(min).toBeGreaterThanOrEqual(4);
    expect(max).toBeGreaterThanOrEqual(min ?? Number.POSITIVE_INFINITY);
  });

  // Head dims whose 8-element chunks do not divide among the lanes of a row (80, 96: some
  // lanes hold a chunk past the row), groups of 1, 3 and 4, rotated and quantized formats.
  const cases: [string, AttentionShape, number[]][] = [
    [
      'MHA, f32, block 8, partial last blocks, context 1',
      { numQHeads: 4, numKvHeads: 4, headDim: 64, blockSize: 8, format: f32Format },
      [1, 7, 8, 9, 130],
    ],
    [
      'GQA 32/8, f16, block 16, head dim 128, a padding sequence of context 0',
      { numQHeads: 32, numKvHeads: 8, headDim: 128, blockSize: 16, format: f16Format },
      [1, 300, 1000, 0],
    ],
    [
      'MQA, f16, block 32, head dim 80',
      { numQHeads: 2, numKvHeads: 1, headDim: 80, blockSize: 32, format: f16Format },
      [5, 64, 65],
    ],
    [
      'GQA group 3, f32, head dim 96, soft-cap',
      {
        numQHeads: 6,
        numKvHeads: 2,
        headDim: 96,
        blockSize: 16,
        format: f32Format,
        softCap: 30,
      },
      [3, 100, 33],
    ],
    [
      'int8 with an 8-point rotation',
      { numQHeads: 4, numKvHeads: 2, headDim: 64, blockSize: 16, format: kvFormat('int8-h8') },
      [5, 77],
    ],
    [
      'int4 groups of 32 with a 32-point rotation',
      {
        numQHeads: 4,
        numKvHeads: 2,
        headDim: 64,
        blockSize: 16,
        format: kvFormat('int4-g32-h32'),
      },
      [5, 77],
    ],
    [
      'block size 6 (a step of 4 keys can span two blocks)',
      { numQHeads: 4, numKvHeads: 2, headDim: 32, blockSize: 6, format: f16Format },
      [1, 13, 50],
    ],
    [
      'fp8 e4m3',
      { numQHeads: 4, numKvHeads: 2, headDim: 64, blockSize: 16, format: kvFormat('fp8-e4m3') },
      [40, 1],
    ],
  ];
  for (const [name, shape, lens] of cases) {
    it(
      `${name}: one pass and split-K`,
      async () => {
        const fx = pagedFixture(seededRng(7), { ...shape, contextLens: lens });
        const kernel = await PagedDecodeAttention.create(gpu, fx.config, { kernel: 'subgroup' });
        expect(kernel.kernel).toBe('subgroup');
        await checkDecode(gpu, kernel, fx, 9, 1);
        await checkDecode(gpu, kernel, fx, 10, 3);
      },
      COMPILE_TIMEOUT,
    );
  }

  it(
    'every keys-per-step (2, 4, 8) matches the reference, with keys past the end mid-step',
    async () => {
      // Contexts that end inside a step for every step size, and one shorter than a step.
      const shape = { numQHeads: 4, numKvHeads: 2, headDim: 32, blockSize: 16, format: f16Format };
      const fx = pagedFixture(seededRng(3), { ...shape, contextLens: [1, 3, 70, 133] });
      for (const subgroupKeysPerStep of [2, 4, 8] as const) {
        const kernel = await PagedDecodeAttention.create(gpu, fx.config, {
          kernel: 'subgroup',
          subgroupKeysPerStep,
        });
        await checkDecode(gpu, kernel, fx, 11, 1);
        await checkDecode(gpu, kernel, fx, 12, 2);
      }
      const bad = { kernel: 'subgroup', subgroupKeysPerStep: 3 } as unknown as PagedDecodeOptions;
      expect(await attentionErrorCode(() => PagedDecodeAttention.create(gpu, fx.config, bad))).toBe(
        'INVALID_ARGUMENT',
      );
    },
    COMPILE_TIMEOUT,
  );

  it(
    'random batches (lengths, tables, splits) match the reference',
    async () => {
      const shape = {
        numQHeads: 8,
        numKvHeads: 2,
        headDim: 64,
        blockSize: 16,
        format: f16Format,
      };
      const config = pagedFixture(seededRng(1), { ...shape, contextLens: [1] }).config;
      const kernel = await PagedDecodeAttention.create(gpu, config, { kernel: 'subgroup' });
      await fc.assert(
        fc.asyncProperty(
          fc.array(fc.integer({ min: 0, max: 700 }), { minLength: 1, maxLength: 5 }),
          fc.constantFrom<number | 'auto'>(1, 2, 5, 'auto'),
          fc.integer({ min: 1, max: 2 ** 30 }),
          async (lens, numSplits, seed) => {
            const fx = pagedFixture(seededRng(seed), { ...shape, contextLens: lens });
            await checkDecode(gpu, kernel, fx, seed + 1, numSplits);
          },
        ),
        { numRuns: 12 },
      );
    },
    COMPILE_TIMEOUT,
  );
});

describe('subgroupLanesPerRow', () => {
  it('is the largest power of two within both the row chunks and the subgroup', () => {
    expect(subgroupLanesPerRow(128, 32)).toBe(16);
    expect(subgroupLanesPerRow(128, 8)).toBe(8);
    expect(subgroupLanesPerRow(80, 32)).toBe(8);
    expect(subgroupLanesPerRow(96, 64)).toBe(8);
    expect(subgroupLanesPerRow(16, 4)).toBe(2);
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 16 }).map((c) => c * 8),
        fc.constantFrom(4, 8, 16, 32, 64, 128),
        (d, sg) => {
          const r = subgroupLanesPerRow(d, sg);
          expect(Number.isInteger(Math.log2(r))).toBe(true);
          expect(r).toBeLessThanOrEqual(Math.min(d / 8, sg));
          expect(2 * r).toBeGreaterThan(Math.min(d / 8, sg));
        },
      ),
    );
  });
});
