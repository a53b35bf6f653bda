import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { MoeConfig } from '../config.js';
import { addExpertOutputs, gatherExpertRows, routeExperts } from './moe-routing.js';

const moeArb = fc
  .record({ numExperts: fc.integer({ min: 1, max: 12 }), k: fc.integer({ min: 1, max: 12 }) })
  .chain(({ numExperts, k }) =>
    fc.record({
      moe: fc.record({
        numExperts: fc.constant(numExperts),
        numExpertsPerToken: fc.constant(Math.min(k, numExperts)),
        expertIntermediateSize: fc.constant(4),
        normTopkProb: fc.boolean(),
      }),
      tokens: fc.integer({ min: 0, max: 9 }),
    }),
  )
  .chain(({ moe, tokens }) =>
    fc.record({
      moe: fc.constant(moe as MoeConfig),
      tokens: fc.constant(tokens),
      // Few distinct values: ties between experts are common.
      logits: fc.array(
        fc.integer({ min: -3, max: 3 }).map((v) => v / 2),
        {
          minLength: tokens * moe.numExperts,
          maxLength: tokens * moe.numExperts,
        },
      ),
    }),
  );

describe('routeExperts', () => {
  it('property: each token gets its k most probable experts (ties to the lower index), each expert its tokens once, grouped by expert in token order', () => {
    fc.assert(
      fc.property(moeArb, ({ moe, tokens, logits }) => {
        const n = moe.numExperts;
        const k = moe.numExpertsPerToken;
        const r = routeExperts(Float32Array.from(logits), tokens, moe);
        // Every grouped row is used once: the experts together multiply t·k rows, no more.
        expect(r.offsets[0]).toBe(0);
        expect(r.offsets[n]).toBe(tokens * k);
        expect([...r.rowOf].sort((a, b) => a - b)).toEqual(
          Array.from({ length: tokens * k }, (_, i) => i),
        );
        const expertOf = (row: number) => {
          let e = 0;
          while ((r.offsets[e + 1] as number) <= row) e++;
          return e;
        };
        for (let e = 0; e < n; e++) {
          const toks = Array.from(r.tokenOf.subarray(r.offsets[e], r.offsets[e + 1]));
          // Ascending and distinct: an expert sees a token at most once.
          expect(toks).toEqual([...new Set(toks)].sort((a, b) => a - b));
        }
        for (let i = 0; i < tokens; i++) {
          const row = logits.slice(i * n, (i + 1) * n);
          const want = row
            .map((v, e) => [v, e] as const)
            .sort((a, b) => b[0] - a[0] || a[1] - b[1])
            .slice(0, k)
            .map(([, e]) => e);
          const got = Array.from({ length: k }, (_, j) => {
            const g = r.rowOf[i * k + j] as number;
            expect(r.tokenOf[g]).toBe(i);
            return expertOf(g);
          });
          expect(got).toEqual(want);
          const max = Math.max(...row);
          const total = row.reduce((a, v) => a + Math.exp(v - max), 0);
          const probs = want.map((e) => Math.exp((row[e] as number) - max) / total);
          const picked = probs.reduce((a, b) => a + b, 0);
          for (let j = 0; j < k; j++) {
            const w = moe.normTopkProb ? (probs[j] as number) / picked : (probs[j] as number);
            expect(r.weights[i * k + j]).toBeCloseTo(w, 6);
          }
        }
      }),
      { numRuns: 300 },
    );
  });

  it('gathers each grouped row from its token and adds the weighted outputs to the residual', () => {
    const moe: MoeConfig = {
      numExperts: 3,
      numExpertsPerToken: 2,
      expertIntermediateSize: 4,
      normTopkProb: true,
    };
    // Token 0 prefers experts 2 then 0; token 1 experts 1 then 2 (equal probabilities).
    const r = routeExperts(Float32Array.of(1, 0, 2, -5, 3, 3), 2, moe);
    expect(Array.from(r.offsets)).toEqual([0, 1, 2, 4]);
    expect(Array.from(r.tokenOf)).toEqual([0, 1, 0, 1]);
    const x = Float32Array.of(10, 20, 30, 40);
    const xe = new Float32Array(8);
    gatherExpertRows(r, x, 2, xe);
    expect(Array.from(xe)).toEqual([10, 20, 30, 40, 10, 20, 30, 40]);
    const y = Float32Array.of(1, 1, 2, 2, 3, 3, 4, 4);
    const residual = Float32Array.of(0.5, 0.5, 0, 0);
    addExpertOutputs(r, y, 2, residual);
    const w0 = 1 / (1 + Math.exp(-1));
    expect(residual[0]).toBeCloseTo(0.5 + w0 * 3 + (1 - w0) * 1, 5);
    expect(residual[2]).toBeCloseTo(0.5 * 2 + 0.5 * 4, 5);
  });
});
