import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { QuantizerError } from './errors.js';
import { compareTensors } from './metrics.js';

describe('compareTensors', () => {
  it('gives the textbook figures', () => {
    const c = compareTensors([1, 0], [0, 1]);
    expect(c.maxAbsError).toBe(1);
    expect(c.mse).toBe(1);
    expect(c.cosine).toBe(0);
    expect(c.snrDb).toBeCloseTo(10 * Math.log10(0.5), 12);
    const d = compareTensors([3, 4], [3, 4]);
    expect(d).toEqual({ maxAbsError: 0, mse: 0, cosine: 1, snrDb: Number.POSITIVE_INFINITY });
    expect(compareTensors([2, 0], [1, 0]).snrDb).toBeCloseTo(10 * Math.log10(4), 12);
  });
  it('propagates NaN so a broken kernel cannot look accurate', () => {
    const c = compareTensors([1, 2, 3], [1, Number.NaN, 3]);
    expect(c.maxAbsError).toBeNaN();
    expect(c.cosine).toBeNaN();
    expect(c.snrDb).toBeNaN();
  });
  it('cosine stays within [-1, 1]', () => {
    fc.assert(
      fc.property(
        fc.array(fc.float({ min: -100, max: 100, noNaN: true }), { minLength: 2, maxLength: 20 }),
        fc.float({ min: Math.fround(0.01), max: 100, noNaN: true }),
        (a, k) => {
          const b = a.map((v) => v * k + 0.001);
          const c = compareTensors(a, b);
          return c.cosine <= 1 + 1e-12 && c.cosine >= -1 - 1e-12;
        },
      ),
    );
  });
  it('rejects mismatched or empty input', () => {
    expect(() => compareTensors([1], [1, 2])).toThrow(QuantizerError);
    expect(() => compareTensors([], [])).toThrow(/empty/);
  });
});
