import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { percentile, summarize } from './stats.js';

describe('summarize', () => {
  it('uses nearest-rank percentiles', () => {
    const s = summarize([5, 1, 4, 2, 3, 6, 7, 8, 9, 10]);
    expect(s.p50).toBe(5);
    expect(s.p90).toBe(9);
    expect(s.p99).toBe(10);
    expect(s.mean).toBe(5.5);
    expect(Number.isNaN(summarize([]).p50)).toBe(true);
  });

  it('percentiles are members of the sample, ordered, and bounded by min and max', () => {
    fc.assert(
      fc.property(
        fc.array(fc.double({ noNaN: true, min: -1e6, max: 1e6 }), { minLength: 1 }),
        (xs) => {
          const sorted = [...xs].sort((a, b) => a - b);
          const s = summarize(xs);
          expect(xs).toContain(s.p50);
          expect(s.p50).toBeLessThanOrEqual(s.p90);
          expect(s.p90).toBeLessThanOrEqual(s.p99);
          expect(s.p99).toBeLessThanOrEqual(s.max);
          expect(percentile(sorted, 0)).toBe(sorted[0]);
          expect(s.max).toBe(sorted.at(-1));
        },
      ),
    );
  });
});
