import { seededRandom } from '@kvasir/test-utils';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { f16Format, f32Format } from '../kv-format/float.js';
import type { KvFormat } from '../kv-format/types.js';
import { kvCacheLayout } from '../layout.js';
import {
  decodeKeys,
  KEY_SHIFT_FORMATS,
  keysAtPositions,
  writeKeys,
} from '../testing/key-shift-fixtures.js';
import { maxAbsDiff } from '../testing/random.js';
import { type RopeConfig, type RopeStyle, ropeTables } from './rope-reference.js';
import { type KeyShiftConfig, shiftKeysReference } from './shift-keys-reference.js';

const MAX_POSITION = 512;

function setup(format: KvFormat, style: RopeStyle, partial: boolean, scaled: boolean) {
  const headDim = 64;
  const numKvHeads = 2;
  const rope: RopeConfig = {
    numQHeads: 4,
    numKvHeads,
    headDim,
    style,
    theta: 10000,
    maxPosition: MAX_POSITION,
    ...(partial ? { rotaryDim: 32 } : {}),
    ...(scaled
      ? {
          scaling: {
            factor: 8,
            lowFreqFactor: 1,
            highFreqFactor: 4,
            originalMaxPositionEmbeddings: 64,
          },
        }
      : {}),
  };
  const config: KeyShiftConfig = { numKvHeads, headDim, blockSize: 8, format, rope };
  return { config, layout: kvCacheLayout(config), tables: ropeTables(rope) };
}

/** Largest error of one encode/decode round trip of the rows of `raw` rotated to `start`. */
function roundTripError(
  s: ReturnType<typeof setup>,
  raw: Float32Array,
  blocks: number,
  start: (b: number) => number,
): number {
  const f32 = { ...s.config, format: f32Format };
  const f32Layout = kvCacheLayout(f32);
  const exact = decodeKeys(f32Layout, writeKeys(f32, f32Layout, s.tables, raw, blocks, start));
  const coded = decodeKeys(s.layout, writeKeys(s.config, s.layout, s.tables, raw, blocks, start));
  return maxAbsDiff(exact, coded);
}

const arbShape = fc.record({
  seed: fc.integer(),
  style: fc.constantFrom<RopeStyle>('rotate-half', 'interleaved'),
  partial: fc.boolean(),
  scaled: fc.boolean(),
});

describe('shiftKeysReference', () => {
  for (const format of KEY_SHIFT_FORMATS) {
    it(`${format.name}: keys written at p and shifted by d are keys written at p + d (property)`, () => {
      fc.assert(
        fc.property(
          arbShape,
          fc.integer({ min: 0, max: 200 }),
          fc.integer({ min: -150, max: 150 }).filter((d) => d !== 0),
          ({ seed, style, partial, scaled }, p0, d) => {
            const s = setup(format, style, partial, scaled);
            const blocks = 3;
            // Positions stay >= 0 after the shift, as they do in a cache.
            const from = (b: number) => Math.max(p0, -d) + b * s.layout.blockSize;
            const to = (b: number) => from(b) + d;
            const { cache, raw } = keysAtPositions(
              seededRandom(seed),
              s.config,
              s.layout,
              s.tables,
              blocks,
              from,
            );
            const before = cache.slice();
            shiftKeysReference(s.config, s.tables, cache, [
              { block: 0, delta: d },
              { block: 2, delta: d },
            ]);
            const want = decodeKeys(
              s.layout,
              writeKeys(s.config, s.layout, s.tables, raw, blocks, to),
            );
            const got = decodeKeys(s.layout, cache);
            const per = s.layout.numKvHeads * s.layout.blockSize * s.layout.headDim;
            const e = Math.max(
              roundTripError(s, raw, blocks, from),
              roundTripError(s, raw, blocks, to),
            );
            // Two roundings on the shifted side (one rotated), one on the direct side.
            const tol = 4 * e + 4e-6;
            for (const b of [0, 2]) {
              const sl = (x: Float32Array) => x.subarray(b * per, (b + 1) * per);
              expect(maxAbsDiff(sl(got), sl(want))).toBeLessThanOrEqual(tol);
            }
            // Block 1 is not listed: every word as it was, K, V and scales.
            const bw = s.layout.blockWords;
            expect(cache.subarray(bw, 2 * bw)).toEqual(before.subarray(bw, 2 * bw));
            // V slabs of the shifted blocks are untouched word for word.
            for (const b of [0, 2]) {
              for (let h = 0; h < s.layout.numKvHeads; h++) {
                const v = b * bw + (2 * h + 1) * s.layout.slabWords;
                expect(cache.subarray(v, v + s.layout.slabWords)).toEqual(
                  before.subarray(v, v + s.layout.slabWords),
                );
              }
            }
          },
        ),
        { numRuns: 12 },
      );
    });
  }

  for (const format of [f32Format, f16Format]) {
    it(`${format.name}: a shift by a then b is a shift by a + b (property)`, () => {
      fc.assert(
        fc.property(
          arbShape,
          fc.integer({ min: -200, max: 200 }),
          fc.integer({ min: -200, max: 200 }),
          ({ seed, style, partial, scaled }, a, b) => {
            fc.pre(a !== 0 && b !== 0 && a + b !== 0);
            const s = setup(format, style, partial, scaled);
            const start = (blk: number) => 300 + blk * s.layout.blockSize;
            const { cache, raw } = keysAtPositions(
              seededRandom(seed),
              s.config,
              s.layout,
              s.tables,
              2,
              start,
            );
            const twice = cache.slice();
            shiftKeysReference(s.config, s.tables, twice, [{ block: 1, delta: a }]);
            shiftKeysReference(s.config, s.tables, twice, [{ block: 1, delta: b }]);
            shiftKeysReference(s.config, s.tables, cache, [{ block: 1, delta: a + b }]);
            const e = roundTripError(s, raw, 2, start);
            expect(
              maxAbsDiff(decodeKeys(s.layout, twice), decodeKeys(s.layout, cache)),
            ).toBeLessThanOrEqual(4 * e + 4e-6);
          },
        ),
        { numRuns: 40 },
      );
    });
  }

  it('rejects bad shifts before touching the cache', () => {
    const s = setup(f16Format, 'rotate-half', false, false);
    const cache = new Uint32Array(4 * s.layout.blockWords).fill(0x3c003c00);
    const before = cache.slice();
    const bad = (shifts: { block: number; delta: number }[], code: string, re: RegExp) => {
      expect(() => shiftKeysReference(s.config, s.tables, cache, shifts)).toThrow(re);
      expect(() => shiftKeysReference(s.config, s.tables, cache, shifts)).toThrow(
        expect.objectContaining({ code }),
      );
    };
    bad([{ block: 4, delta: 1 }], 'BLOCK_OUT_OF_RANGE', /block 4 is outside the cache's 4/);
    bad([{ block: 0, delta: 0 }], 'INVALID_ARGUMENT', /delta 0 must be a nonzero integer/);
    bad([{ block: 0, delta: -MAX_POSITION }], 'INVALID_ARGUMENT', /\|delta\| < maxPosition 512/);
    bad([{ block: 0, delta: 1.5 }], 'INVALID_ARGUMENT', /delta 1.5/);
    bad(
      [
        { block: 1, delta: 1 },
        { block: 1, delta: 2 },
      ],
      'INVALID_ARGUMENT',
      /block 1 is listed twice/,
    );
    // A valid shift first, then a bad one: nothing is applied.
    bad(
      [
        { block: 0, delta: 3 },
        { block: 9, delta: 1 },
      ],
      'BLOCK_OUT_OF_RANGE',
      /shifts\[1\]/,
    );
    expect(cache).toEqual(before);
    const other = { ...s.config, rope: { ...s.config.rope, numKvHeads: 1 } };
    expect(() => shiftKeysReference(other, s.tables, cache, [])).toThrow(/rope has 1 KV heads/);
    const short = ropeTables({ ...s.config.rope, maxPosition: 16 });
    expect(() => shiftKeysReference(s.config, short, cache, [])).toThrow(
      expect.objectContaining({ code: 'SHAPE_MISMATCH' }),
    );
  });
});
