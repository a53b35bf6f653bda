import { seededRandom } from '@kvasir/test-utils';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { PAGED_ATTENTION_HEAD_DIMS } from '../attention/config.js';
import { denseAttention } from '../attention/dense-reference.js';
import { pagedDecodeAttentionCpu } from '../decode/paged-decode-reference.js';
import { f16Format, f32Format } from '../kv-format/float.js';
import {
  pagedFixture,
  prefillBatchFixture,
  randomQuery,
  type AttentionShape as Shape,
} from '../testing/paged-fixtures.js';
import { maxAbsDiff } from '../testing/random.js';
import { pagedPrefillAttentionCpu } from './paged-prefill-reference.js';

/** CPU references accumulate in f64 like the dense one; only the f32 output rounding differs. */
const CPU_TOL = 1e-6;

/** Prefill through the paged CPU reference and through dense causal attention per sequence. */
function prefillBoth(seed: number, shape: Shape, pasts: number[], queryLens: number[]) {
  const rng = seededRandom(seed);
  const { fx, args } = prefillBatchFixture(rng, shape, pasts, queryLens);
  const { query: q, queryStarts, contextLens } = args;
  const got = pagedPrefillAttentionCpu(fx.config, { ...args, kvCache: fx.cache });
  const row = shape.numQHeads * shape.headDim;
  const want = new Float32Array(got.length);
  queryLens.forEach((n, s) => {
    const start = queryStarts[s]!;
    const o = denseAttention({
      q: q.subarray(start * row, (start + n) * row),
      k: fx.denseK[s]!,
      v: fx.denseV[s]!,
      numQueries: n,
      numKeys: contextLens[s]!,
      numQHeads: shape.numQHeads,
      numKvHeads: shape.numKvHeads,
      headDim: shape.headDim,
      ...(shape.softCap === undefined ? {} : { softCap: shape.softCap }),
      ...(shape.window === undefined ? {} : { window: shape.window }),
    });
    want.set(o, start * row);
  });
  return { got, want };
}

describe('pagedPrefillAttentionCpu vs dense causal attention', () => {
  it('mixes fresh prompts, chunked prefill and a prefix-cache hit in one batch', () => {
    const shape = { numQHeads: 8, numKvHeads: 2, headDim: 64, blockSize: 16, format: f16Format };
    const { got, want } = prefillBoth(11, shape, [0, 37, 64], [20, 9, 1]);
    expect(maxAbsDiff(got, want)).toBeLessThan(CPU_TOL);
  });

  it('MHA f32 with block 8 and a soft-cap', () => {
    const shape = {
      numQHeads: 3,
      numKvHeads: 3,
      headDim: 96,
      blockSize: 8,
      format: f32Format,
      softCap: 2,
    };
    const { got, want } = prefillBoth(12, shape, [5, 0], [11, 3]);
    expect(maxAbsDiff(got, want)).toBeLessThan(CPU_TOL);
  });

  it('a sliding window of 7 over fresh prompts, chunked prefill and a prefix-cache hit', () => {
    const shape = {
      numQHeads: 8,
      numKvHeads: 2,
      headDim: 64,
      blockSize: 8,
      format: f16Format,
      window: 7,
    };
    const { got, want } = prefillBoth(13, shape, [0, 37, 64], [20, 9, 1]);
    expect(maxAbsDiff(got, want)).toBeLessThan(CPU_TOL);
    // The window changes the result: the whole causal range gives other outputs.
    const { window: _, ...fullShape } = shape;
    const full = prefillBoth(13, fullShape, [0, 37, 64], [20, 9, 1]);
    expect(maxAbsDiff(full.got, got)).toBeGreaterThan(1e-2);
  });

  it('equals decode when every query length is 1', () => {
    const shape = { numQHeads: 4, numKvHeads: 1, headDim: 128, blockSize: 32, format: f16Format };
    const rng = seededRandom(5);
    const fx = pagedFixture(rng, { ...shape, contextLens: [9, 70] });
    const q = randomQuery(rng, fx.config, 2);
    const common = {
      query: q,
      kvCache: fx.cache,
      blockTables: fx.blockTables,
      contextLens: fx.contextLens,
      numSeqs: 2,
      maxBlocksPerSeq: fx.maxBlocksPerSeq,
    };
    const decode = pagedDecodeAttentionCpu(fx.config, common);
    const prefill = pagedPrefillAttentionCpu(fx.config, {
      ...common,
      queryStarts: Uint32Array.of(0, 1),
      queryLens: Uint32Array.of(1, 1),
    });
    expect(Array.from(prefill)).toEqual(Array.from(decode));
  });

  it('matches dense attention on random small shapes (property)', () => {
    fc.assert(
      fc.property(
        fc.record({
          seed: fc.integer({ min: 0, max: 1e9 }),
          numKvHeads: fc.integer({ min: 1, max: 3 }),
          group: fc.integer({ min: 1, max: 4 }),
          headDim: fc.constantFrom(...PAGED_ATTENTION_HEAD_DIMS),
          blockSize: fc.constantFrom(1, 3, 8, 16, 32),
          f16: fc.boolean(),
          seqs: fc.array(
            fc.record({
              past: fc.integer({ min: 0, max: 40 }),
              queryLen: fc.integer({ min: 1, max: 6 }),
            }),
            { minLength: 1, maxLength: 3 },
          ),
        }),
        (p) => {
          const shape = {
            numQHeads: p.numKvHeads * p.group,
            numKvHeads: p.numKvHeads,
            headDim: p.headDim,
            blockSize: p.blockSize,
            format: p.f16 ? f16Format : f32Format,
          };
          const { got, want } = prefillBoth(
            p.seed,
            shape,
            p.seqs.map((s) => s.past),
            p.seqs.map((s) => s.queryLen),
          );
          expect(maxAbsDiff(got, want)).toBeLessThan(CPU_TOL);
        },
      ),
      { numRuns: 40, seed: 20261130 },
    );
  });
});
