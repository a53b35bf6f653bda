import type { Gpu } from '@kvasir/gpu';
import { seededRandom } from '@kvasir/test-utils';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { f16Format, f32Format } from '../kv-format/float.js';
import { kvFormat } from '../kv-format/registry.js';
import { checkDecode } from '../testing/decode-check.js';
import { attentionErrorCode } from '../testing/errors.js';
import { lavapipeGpu } from '../testing/lavapipe.js';
import { FULL_MATRIX, withFullMatrix } from '../testing/matrix.js';
import { type AttentionShape, pagedFixture } from '../testing/paged-fixtures.js';
import { PagedDecodeAttention, type PagedDecodeOptions } from './paged-decode.js';
import { subgroupLanesPerRow } from './subgroup.wgsl.js';

/** The random batches' shape; a case below runs the same kernel (one compile for both). */
const RANDOM_SHAPE = {
  numQHeads: 3,
  numKvHeads: 1,
  headDim: 16,
  blockSize: 16,
  format: f16Format,
} as const;
/** Every keys-per-step runs on this shape; a case below runs the default one. */
const STEP_SHAPE = {
  numQHeads: 4,
  numKvHeads: 2,
  headDim: 16,
  blockSize: 6,
  format: f16Format,
} as const;

describe('subgroup decode kernel on lavapipe (subgroups feature) vs CPU reference', () => {
  let gpu: Gpu;
  beforeAll(async () => {
    gpu = await lavapipeGpu();
  });
  afterAll(() => gpu?.destroy());

  it('opens lavapipe at the core level with subgroups and reports their sizes', () => {
    expect(gpu.backend).toBe('vulkan');
    expect(gpu.featureLevel).toBe('core');
    expect(gpu.features.has('subgroups')).toBe(true);
    const { subgroupMinSize: min, subgroupMaxSize: max } = gpu.adapterInfo;
    expect(min).toBeGreaterThanOrEqual(4);
    expect(max).toBeGreaterThanOrEqual(min ?? Number.POSITIVE_INFINITY);
  });

  // lavapipe compiles each kernel for 10 s to minutes on its first dispatch, and the unrolled
  // code grows with the heads per workgroup and the 8-element chunks per lane, not with the
  // head dim as such. So CI runs few kernels, each showing several cases: head dim 48 (with
  // lavapipe's subgroups of 8, 6 chunks over 4 lanes, two of them holding a chunk past the
  // row), groups of 1, 2 and 3, MQA, block sizes 6, 8, 16 and 32, soft-cap, and the rotated and
  // quantized formats. The split-K pass differs from the single one only in the output row and
  // the (max, sum) it writes: keys, chunks, loads and rotations are the same code, so CI runs it
  // on one case (and the random batches). KVASIR_FULL_MATRIX=1 adds the serving shapes, each in
  // both passes.
  const ONE = [1];
  const BOTH = [1, 3];
  const cases = withFullMatrix<[string, AttentionShape, number[], number[]]>(
    [
      [
        'MHA, f32, block 8, head dim 48 (chunks past the row), soft-cap, partial last blocks, context 1',
        {
          numQHeads: 4,
          numKvHeads: 4,
          headDim: 48,
          blockSize: 8,
          format: f32Format,
          softCap: 30,
        },
        [1, 7, 8, 9, 130],
        ONE,
      ],
      [
        'MQA group 3, f16, block 16, head dim 16, a padding sequence of context 0',
        RANDOM_SHAPE,
        [1, 300, 1000, 0],
        BOTH,
      ],
      ['block size 6 (a step of 4 keys can span two blocks)', STEP_SHAPE, [1, 13, 50], ONE],
      [
        'int8 with an 8-point rotation',
        { numQHeads: 2, numKvHeads: 2, headDim: 32, blockSize: 16, format: kvFormat('int8-h8') },
        [5, 77],
        ONE,
      ],
      [
        // One rotation run per row, across all four lanes of the row (int8-h8 above has four
        // runs per row).
        'int4 groups of 32 with a 32-point rotation',
        {
          numQHeads: 2,
          numKvHeads: 2,
          headDim: 32,
          blockSize: 16,
          format: kvFormat('int4-g32-h32'),
        },
        [5, 77],
        ONE,
      ],
      [
        'fp8 e4m3, block 32',
        { numQHeads: 2, numKvHeads: 2, headDim: 32, blockSize: 32, format: kvFormat('fp8-e4m3') },
        [40, 1, 70],
        ONE,
      ],
    ],
    [
      [
        'MHA, f32, block 8, head dim 64, partial last blocks, context 1',
        { numQHeads: 4, numKvHeads: 4, headDim: 64, blockSize: 8, format: f32Format },
        [1, 7, 8, 9, 130],
        BOTH,
      ],
      [
        'GQA 32/8, f16, block 16, head dim 128, a padding sequence of context 0',
        { numQHeads: 32, numKvHeads: 8, headDim: 128, blockSize: 16, format: f16Format },
        [1, 300, 1000, 0],
        BOTH,
      ],
      [
        'MQA, f16, block 32, head dim 80',
        { numQHeads: 2, numKvHeads: 1, headDim: 80, blockSize: 32, format: f16Format },
        [5, 64, 65],
        BOTH,
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
        BOTH,
      ],
      [
        'int8 with an 8-point rotation, head dim 64',
        { numQHeads: 4, numKvHeads: 2, headDim: 64, blockSize: 16, format: kvFormat('int8-h8') },
        [5, 77],
        BOTH,
      ],
      [
        'int4 groups of 32 with a 32-point rotation, head dim 64',
        {
          numQHeads: 4,
          numKvHeads: 2,
          headDim: 64,
          blockSize: 16,
          format: kvFormat('int4-g32-h32'),
        },
        [5, 77],
        BOTH,
      ],
      [
        'block size 6, head dim 32 (a step of 4 keys can span two blocks)',
        { numQHeads: 4, numKvHeads: 2, headDim: 32, blockSize: 6, format: f16Format },
        [1, 13, 50],
        BOTH,
      ],
      [
        'fp8 e4m3, head dim 64',
        { numQHeads: 4, numKvHeads: 2, headDim: 64, blockSize: 16, format: kvFormat('fp8-e4m3') },
        [40, 1],
        BOTH,
      ],
    ],
  );
  for (const [name, shape, lens, splits] of cases) {
    it(`${name}: ${splits.length > 1 ? 'one pass and split-K' : 'one pass'}`, async () => {
      const fx = pagedFixture(seededRandom(7), { ...shape, contextLens: lens });
      const kernel = await PagedDecodeAttention.create(gpu, fx.config, { kernel: 'subgroup' });
      expect(kernel.kernel).toBe('subgroup');
      for (const numSplits of splits) {
        await checkDecode(gpu, kernel, fx, numSplits === 1 ? 9 : 10, numSplits);
      }
    });
  }

  it('every keys-per-step (2, 4, 8) matches the reference, with keys past the end mid-step', async () => {
    // Contexts that end inside a step for every step size, and one shorter than a step; with
    // blocks of 6, steps that span two blocks. The default (4) is the block size 6 case's.
    // The key loop is the same in both passes, and a split's end is a multiple of 64 keys:
    // only the context's end falls mid-step, so one pass shows it (the default step's split-K
    // runs above).
    const shapes = withFullMatrix([STEP_SHAPE], [{ ...STEP_SHAPE, headDim: 32, blockSize: 16 }]);
    for (const shape of shapes) {
      const fx = pagedFixture(seededRandom(3), { ...shape, contextLens: [1, 3, 70, 133] });
      for (const subgroupKeysPerStep of [2, 4, 8] as const) {
        const kernel = await PagedDecodeAttention.create(gpu, fx.config, {
          kernel: 'subgroup',
          subgroupKeysPerStep,
        });
        await checkDecode(gpu, kernel, fx, 11, 1);
        if (FULL_MATRIX) await checkDecode(gpu, kernel, fx, 12, 2);
      }
    }
    const fx = pagedFixture(seededRandom(3), { ...STEP_SHAPE, contextLens: [1] });
    const bad = { kernel: 'subgroup', subgroupKeysPerStep: 3 } as unknown as PagedDecodeOptions;
    expect(await attentionErrorCode(() => PagedDecodeAttention.create(gpu, fx.config, bad))).toBe(
      'INVALID_ARGUMENT',
    );
  });

  it('random batches (lengths, tables, splits) match the reference', async () => {
    const shape = FULL_MATRIX ? { ...RANDOM_SHAPE, headDim: 64 } : RANDOM_SHAPE;
    const config = pagedFixture(seededRandom(1), { ...shape, contextLens: [1] }).config;
    const kernel = await PagedDecodeAttention.create(gpu, config, { kernel: 'subgroup' });
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.integer({ min: 0, max: 700 }), { minLength: 1, maxLength: 5 }),
        fc.constantFrom<number | 'auto'>(1, 2, 5, 'auto'),
        fc.integer({ min: 1, max: 2 ** 30 }),
        async (lens, numSplits, seed) => {
          const fx = pagedFixture(seededRandom(seed), { ...shape, contextLens: lens });
          await checkDecode(gpu, kernel, fx, seed + 1, numSplits);
        },
      ),
      { numRuns: 12 },
    );
  });
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
