import { seededRandom } from '@kvasir/test-utils';
import { describe, expect, it } from 'vitest';
import { denseAttention } from '../attention/dense-reference.js';
import { f16Format, f32Format } from '../kv-format/float.js';
import {
  pagedFixture,
  randomQuery,
  type AttentionShape as Shape,
} from '../testing/paged-fixtures.js';
import { maxAbsDiff } from '../testing/random.js';
import { pagedDecodeAttentionCpu } from './paged-decode-reference.js';

/** CPU references accumulate in f64 like the dense one; only the f32 output rounding differs. */
const CPU_TOL = 1e-6;

/** Decode through the paged CPU reference and through dense attention per sequence. */
function decodeBoth(seed: number, shape: Shape, contextLens: number[]) {
  const rng = seededRandom(seed);
  const fx = pagedFixture(rng, { ...shape, contextLens });
  const q = randomQuery(rng, fx.config, contextLens.length);
  const got = pagedDecodeAttentionCpu(fx.config, {
    query: q,
    kvCache: fx.cache,
    blockTables: fx.blockTables,
    contextLens: fx.contextLens,
    numSeqs: contextLens.length,
    maxBlocksPerSeq: fx.maxBlocksPerSeq,
  });
  const row = shape.numQHeads * shape.headDim;
  const want = new Float32Array(got.length);
  contextLens.forEach((len, s) => {
    const o = denseAttention({
      q: q.subarray(s * row, (s + 1) * row),
      k: fx.denseK[s]!,
      v: fx.denseV[s]!,
      numQueries: 1,
      numKeys: len,
      numQHeads: shape.numQHeads,
      numKvHeads: shape.numKvHeads,
      headDim: shape.headDim,
      ...(shape.scale === undefined ? {} : { scale: shape.scale }),
      ...(shape.softCap === undefined ? {} : { softCap: shape.softCap }),
    });
    if (len > 0) want.set(o, s * row);
  });
  return { got, want };
}

describe('pagedDecodeAttentionCpu vs dense attention', () => {
  const cases: [string, Shape, number[]][] = [
    [
      'MHA f32, block 8, partial blocks',
      { numQHeads: 4, numKvHeads: 4, headDim: 64, blockSize: 8, format: f32Format },
      [1, 7, 8, 9, 41],
    ],
    [
      'GQA f16, block 16',
      { numQHeads: 8, numKvHeads: 2, headDim: 128, blockSize: 16, format: f16Format },
      [3, 16, 100],
    ],
    [
      'MQA f16, block 32, soft-cap',
      { numQHeads: 6, numKvHeads: 1, headDim: 80, blockSize: 32, format: f16Format, softCap: 4 },
      [33, 64],
    ],
    [
      'GQA f32, custom scale',
      { numQHeads: 6, numKvHeads: 2, headDim: 96, blockSize: 16, format: f32Format, scale: 0.3 },
      [1, 50],
    ],
  ];
  for (const [name, shape, lens] of cases) {
    it(name, () => {
      const { got, want } = decodeBoth(7, shape, lens);
      expect(maxAbsDiff(got, want)).toBeLessThan(CPU_TOL);
    });
  }

  it('outputs zeros for a padding sequence of context 0', () => {
    const shape = { numQHeads: 2, numKvHeads: 1, headDim: 64, blockSize: 8, format: f32Format };
    const { got } = decodeBoth(3, shape, [5, 0]);
    expect(got.subarray(2 * 64).every((x) => x === 0)).toBe(true);
    expect(got.subarray(0, 2 * 64).some((x) => x !== 0)).toBe(true);
  });
});
