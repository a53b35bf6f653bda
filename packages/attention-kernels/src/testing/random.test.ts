import { seededRandom } from '@kvasir/test-utils';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { f16Format } from '../kv-format/float.js';
import { kvCacheLayout } from '../layout.js';
import {
  maxAbsDiff,
  randomBlockTables,
  randomCache,
  randomSlotMapping,
  shuffledRange,
} from './random.js';

describe('test generators', () => {
  it('repeat for a seed and differ across seeds', () => {
    const a = seededRandom(42);
    const b = seededRandom(42);
    const c = seededRandom(43);
    const xs = Array.from({ length: 8 }, () => a());
    expect(Array.from({ length: 8 }, () => b())).toEqual(xs);
    expect(Array.from({ length: 8 }, () => c())).not.toEqual(xs);
    expect(xs.every((x) => x >= 0 && x < 1)).toBe(true);
  });

  it('shuffle into permutations (property)', () => {
    fc.assert(
      fc.property(fc.integer(), fc.integer({ min: 0, max: 200 }), (seed, n) => {
        const p = shuffledRange(seededRandom(seed), n);
        expect([...p].sort((x, y) => x - y)).toEqual(Array.from({ length: n }, (_, i) => i));
      }),
    );
  });

  it('give each sequence distinct blocks and valid slots (property)', () => {
    fc.assert(
      fc.property(
        fc.integer(),
        fc.array(fc.integer({ min: 1, max: 100 }), { minLength: 1, maxLength: 5 }),
        (seed, lens) => {
          const rng = seededRandom(seed);
          const need = lens.reduce((s, l) => s + Math.ceil(l / 16), 0);
          const { blockTables, maxBlocksPerSeq } = randomBlockTables(rng, lens, 16, need + 3);
          const used: number[] = [];
          lens.forEach((l, s) => {
            for (let i = 0; i < Math.ceil(l / 16); i++)
              used.push(blockTables[s * maxBlocksPerSeq + i]!);
          });
          expect(new Set(used).size).toBe(used.length);
          expect(used.every((b) => b < need + 3)).toBe(true);
          const slots = randomSlotMapping(rng, 20, 4, 8, 0.2);
          const real = [...slots].filter((s) => s !== -1);
          expect(new Set(real).size).toBe(real.length);
          expect(real.every((s) => s >= 0 && s < 32)).toBe(true);
        },
      ),
    );
  });

  it('fill every row of a random cache', () => {
    const layout = kvCacheLayout({ numKvHeads: 2, headDim: 64, blockSize: 8, format: f16Format });
    const cache = randomCache(seededRandom(1), layout, 2);
    expect(cache.length).toBe(2 * layout.blockWords);
    expect(cache.filter((w) => w === 0).length).toBeLessThan(cache.length / 100);
    expect(maxAbsDiff([1, 2, 3], [1, 2.5, 3])).toBe(0.5);
    expect(Number.isNaN(maxAbsDiff([Number.NaN], [0]))).toBe(true);
  });
});
