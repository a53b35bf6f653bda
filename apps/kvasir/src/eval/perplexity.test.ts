import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { KvasirAppError } from '../errors.js';
import { logSoftmax, PerplexityAccumulator, slidingWindows } from './perplexity.js';

describe('slidingWindows (Hugging Face perplexity with stride)', () => {
  it('scores every token at most once, in windows of at most ctx tokens, ending at the end', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 2, max: 3000 }),
        fc.integer({ min: 2, max: 300 }),
        fc.integer({ min: 1, max: 300 }),
        (numTokens, ctx, strideSeed) => {
          const stride = 1 + (strideSeed % ctx);
          const windows = slidingWindows(numTokens, ctx, stride);
          const scored = new Uint8Array(numTokens);
          // Unscored: the first token, and a window's first token when the window before it
          // ended right there (stride = ctx), since nothing in the window precedes it.
          const unscored = new Set([0]);
          let previousEnd = 0;
          windows.forEach((w, k) => {
            expect(w.begin).toBe(k * stride);
            expect(w.end - w.begin).toBeLessThanOrEqual(ctx);
            // A window scores what the previous one left, never its own first token.
            expect(w.scoreFrom).toBe(Math.max(previousEnd, w.begin + 1));
            for (let t = w.scoreFrom; t < w.end; t++) scored[t]!++;
            if (w.begin === previousEnd) unscored.add(w.begin);
            previousEnd = w.end;
          });
          expect(windows.at(-1)!.end).toBe(numTokens);
          for (let t = 0; t < numTokens; t++) expect(scored[t]).toBe(unscored.has(t) ? 0 : 1);
          if (stride < ctx) expect(unscored.size).toBe(1);
        },
      ),
    );
  });

  it('matches the guide on a small case: ctx 4, stride 2 over 9 tokens', () => {
    expect(slidingWindows(9, 4, 2)).toEqual([
      { begin: 0, end: 4, scoreFrom: 1 },
      { begin: 2, end: 6, scoreFrom: 4 },
      { begin: 4, end: 8, scoreFrom: 6 },
      { begin: 6, end: 9, scoreFrom: 8 },
    ]);
  });

  it('refuses a stride outside [1, ctx], a window under 2 and a text under 2 tokens', () => {
    const code = (fn: () => unknown) => {
      try {
        fn();
      } catch (error) {
        expect(KvasirAppError.isInstance(error)).toBe(true);
        return [(error as KvasirAppError).code, (error as Error).message];
      }
      throw new Error('expected an error');
    };
    expect(code(() => slidingWindows(10, 4, 5))).toEqual([
      'INVALID_CONFIG',
      expect.stringContaining('--stride'),
    ]);
    expect(code(() => slidingWindows(10, 1, 1))[1]).toContain('--ctx');
    expect(code(() => slidingWindows(1, 4, 2))[1]).toContain('at least 2');
  });
});

describe('PerplexityAccumulator', () => {
  const row = fc
    .array(fc.float({ min: -20, max: 20, noNaN: true }), { minLength: 2, maxLength: 40 })
    .map((a) => Float32Array.from(a));

  it('KL against itself is 0 with full top-1 agreement; against another row it is ≥ 0', () => {
    fc.assert(
      fc.property(row, fc.nat(), fc.nat(), (r, t, shift) => {
        const target = t % r.length;
        const same = new PerplexityAccumulator(r.length);
        same.add(r, target, r);
        expect(same.result().reference).toEqual({
          perplexity: same.result().perplexity,
          meanKl: 0,
          top1Agreement: 1,
        });
        const other = Float32Array.from(r, (_, i) => r[(i + shift) % r.length]!);
        const acc = new PerplexityAccumulator(r.length);
        acc.add(r, target, other);
        expect(acc.result().reference!.meanKl).toBeGreaterThanOrEqual(0);
      }),
    );
  });

  it('perplexity is exp of the mean negative log-likelihood; KL as its definition', () => {
    const a = Float32Array.from([2, 0, -1]);
    const b = Float32Array.from([0, 1, 0]);
    const acc = new PerplexityAccumulator(3);
    acc.add(a, 1, b);
    acc.add(b, 0, a);
    const soft = (x: Float32Array) => {
      const z = Math.log([...x].reduce((s, v) => s + Math.exp(v), 0));
      return [...x].map((v) => v - z);
    };
    const [la, lb] = [soft(a), soft(b)];
    const nll = -(la[1]! + lb[0]!) / 2;
    const kl = (p: number[], q: number[]) =>
      p.reduce((s, lp, i) => s + Math.exp(lp) * (lp - q[i]!), 0);
    const result = acc.result();
    expect(result.perplexity).toBeCloseTo(Math.exp(nll), 12);
    expect(result.reference!.meanKl).toBeCloseTo((kl(lb, la) + kl(la, lb)) / 2, 12);
    expect(result.reference!.top1Agreement).toBe(0);
    const out = new Float64Array(3);
    expect(logSoftmax(a, out)).toBe(0);
  });
});
