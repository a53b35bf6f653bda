import { seededRandom } from '@kvasir/test-utils';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Rng } from './rng.js';

describe('Rng', () => {
  it("is the workspace's mulberry32: the same sequence as seededRandom for every seed", () => {
    fc.assert(
      fc.property(fc.integer({ min: -(2 ** 31), max: 2 ** 32 - 1 }), (seed) => {
        const rng = new Rng(seed);
        const reference = seededRandom(seed);
        for (let i = 0; i < 64; i++) expect(rng.next()).toBe(reference());
      }),
      { numRuns: 200 },
    );
  });

  it('draws integers in [0, n) and exponentials with mean 1', () => {
    const rng = new Rng(7);
    let sum = 0;
    const counts = new Array<number>(5).fill(0);
    for (let i = 0; i < 20000; i++) {
      const k = rng.int(5);
      expect(Number.isInteger(k) && k >= 0 && k < 5).toBe(true);
      counts[k]!++;
      sum += rng.exp();
    }
    for (const c of counts) expect(c / 20000).toBeCloseTo(0.2, 1);
    expect(sum / 20000).toBeCloseTo(1, 1);
  });
});
