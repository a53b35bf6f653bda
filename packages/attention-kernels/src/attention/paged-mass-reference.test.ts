import { seededRandom } from '@kvasir/test-utils';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { pagedDecodeAttentionCpu } from '../decode/paged-decode-reference.js';
import { f16Format, f32Format } from '../kv-format/float.js';
import { int8KvFormat } from '../kv-format/int8-fp8.js';
import { pagedPrefillAttentionCpu } from '../prefill/paged-prefill-reference.js';
import { denseAttentionMass, randomMassQueries } from '../testing/attention-mass.js';
import { prefillBatchFixture } from '../testing/paged-fixtures.js';
import { maxAbsDiff } from '../testing/random.js';

const arbBatch = fc.record({
  seed: fc.integer(),
  heads: fc.constantFrom([4, 4], [8, 2], [4, 1]),
  blockSize: fc.constantFrom(8, 16),
  format: fc.constantFrom(f32Format, f16Format, int8KvFormat),
  seqs: fc.array(fc.record({ past: fc.nat(40), queryLen: fc.integer({ min: 1, max: 6 }) }), {
    minLength: 1,
    maxLength: 3,
  }),
  softCap: fc.option(fc.constant(5), { nil: undefined }),
});

describe('paged attention references: per-block attention mass', () => {
  it('equals the dense per-block softmax sums and leaves the output unchanged (property)', () => {
    fc.assert(
      fc.property(arbBatch, ({ seed, heads, blockSize, format, seqs, softCap }) => {
        const rng = seededRandom(seed);
        const [numQHeads, numKvHeads] = heads as [number, number];
        const shape = { numQHeads, numKvHeads, headDim: 16, blockSize, format, softCap };
        const pasts = seqs.map((s) => s.past);
        const queryLens = seqs.map((s) => s.queryLen);
        const { fx, args } = prefillBatchFixture(rng, shape, pasts, queryLens);
        const massQueries = randomMassQueries(rng, queryLens);
        const massOut = new Float32Array(seqs.length * fx.maxBlocksPerSeq).fill(0.25);
        const plain = pagedPrefillAttentionCpu(fx.config, { ...args, kvCache: fx.cache });
        const got = pagedPrefillAttentionCpu(fx.config, {
          ...args,
          kvCache: fx.cache,
          massQueries,
          massOut,
        });
        expect(got).toEqual(plain);
        const row = numQHeads * 16;
        seqs.forEach(({ queryLen }, s) => {
          const start = args.queryStarts[s]!;
          const ctx = fx.contextLens[s]!;
          const m = massQueries[s]!;
          const mine = massOut.subarray(s * fx.maxBlocksPerSeq, (s + 1) * fx.maxBlocksPerSeq);
          const blocks = Math.ceil(ctx / blockSize);
          // Added into what was there (0.25), and nothing past the sequence's blocks.
          const want = denseAttentionMass({
            q: args.query.subarray(start * row, (start + queryLen) * row),
            k: fx.denseK[s]!,
            numQueries: queryLen,
            numKeys: ctx,
            numQHeads,
            numKvHeads,
            headDim: 16,
            blockSize,
            massQueries: m,
            ...(softCap === undefined ? {} : { softCap }),
          });
          const added = Array.from(mine.subarray(0, blocks), (x) => x - 0.25);
          expect(maxAbsDiff(added, m === 0 ? new Float64Array(blocks) : want)).toBeLessThan(1e-5);
          expect(mine.subarray(blocks).every((x) => x === 0.25)).toBe(true);
          const total = added.reduce((a, b) => a + b, 0);
          expect(Math.abs(total - numQHeads * m)).toBeLessThan(1e-4);
        });
      }),
      { numRuns: 40 },
    );
  });

  it('decode reference: one query per row, mass accumulates over calls (layers)', () => {
    const rng = seededRandom(5);
    const shape = { numQHeads: 8, numKvHeads: 2, headDim: 32, blockSize: 16, format: f16Format };
    const { fx, args } = prefillBatchFixture(rng, shape, [40, 3, 16], [1, 1, 1]);
    const decodeArgs = {
      query: args.query,
      kvCache: fx.cache,
      blockTables: args.blockTables,
      contextLens: args.contextLens,
      numSeqs: 3,
      maxBlocksPerSeq: args.maxBlocksPerSeq,
    };
    const massQueries = Uint32Array.of(1, 0, 1);
    const fromPrefill = new Float32Array(3 * args.maxBlocksPerSeq);
    pagedPrefillAttentionCpu(fx.config, {
      ...args,
      kvCache: fx.cache,
      massQueries,
      massOut: fromPrefill,
    });
    const massOut = new Float32Array(3 * args.maxBlocksPerSeq);
    pagedDecodeAttentionCpu(fx.config, { ...decodeArgs, massQueries, massOut });
    expect(massOut).toEqual(fromPrefill);
    expect(massOut[args.maxBlocksPerSeq]).toBe(0); // row 1 asked for none
    pagedDecodeAttentionCpu(fx.config, { ...decodeArgs, massQueries, massOut });
    expect(
      maxAbsDiff(
        massOut,
        fromPrefill.map((x) => 2 * x),
      ),
    ).toBeLessThan(1e-6);
  });

  it('rejects mass arguments that do not fit the batch', () => {
    const rng = seededRandom(6);
    const shape = { numQHeads: 4, numKvHeads: 4, headDim: 16, blockSize: 8, format: f32Format };
    const { fx, args } = prefillBatchFixture(rng, shape, [5, 0], [2, 3]);
    const run = (extra: object) =>
      pagedPrefillAttentionCpu(fx.config, { ...args, kvCache: fx.cache, ...extra });
    const out = new Float32Array(2 * args.maxBlocksPerSeq);
    expect(() => run({ massQueries: Uint32Array.of(3, 0), massOut: out })).toThrow(
      /sequence 0: massQueries 3 exceeds its query length 2/,
    );
    expect(() => run({ massQueries: Uint32Array.of(1), massOut: out })).toThrow(
      expect.objectContaining({ code: 'SHAPE_MISMATCH' }),
    );
    expect(() => run({ massQueries: Uint32Array.of(1, 1), massOut: out.subarray(1) })).toThrow(
      /massOut holds/,
    );
    expect(() => run({ massQueries: Uint32Array.of(1, 1) })).toThrow(/go together/);
  });
});
