import { describe, expect, it } from 'vitest';
import { denseAttention } from './dense-reference.js';

function filled(n: number, f: (i: number) => number): Float32Array {
  return Float32Array.from({ length: n }, (_, i) => f(i));
}

describe('denseAttention', () => {
  it('returns V when there is a single key', () => {
    const v = filled(4, (i) => i + 1);
    const out = denseAttention({
      q: filled(4, (i) => i * 0.3),
      k: filled(4, (i) => -i),
      v,
      numQueries: 1,
      numKeys: 1,
      numQHeads: 1,
      numKvHeads: 1,
      headDim: 4,
    });
    expect(Array.from(out)).toEqual(Array.from(v));
  });

  it('averages the visible values when all scores are equal (causal prefix)', () => {
    // q = 0 makes every score 0, so each causal row is the mean of its visible V rows.
    const numKeys = 5;
    const headDim = 2;
    const v = filled(numKeys * headDim, (i) => (i % 2 === 0 ? i : -i));
    const out = denseAttention({
      q: new Float32Array(numKeys * headDim),
      k: filled(numKeys * headDim, (i) => Math.sin(i)),
      v,
      numQueries: numKeys,
      numKeys,
      numQHeads: 1,
      numKvHeads: 1,
      headDim,
    });
    for (let i = 0; i < numKeys; i++) {
      for (let d = 0; d < headDim; d++) {
        let mean = 0;
        for (let j = 0; j <= i; j++) mean += v[j * headDim + d]!;
        mean /= i + 1;
        expect(out[i * headDim + d]).toBeCloseTo(mean, 5);
      }
    }
  });

  it('weights two keys by the softmax of their scaled scores', () => {
    // scores: q·k0 = 0, q·k1 = 2; scale 0.5 → softmax(0, 1) = (1, e) / (1 + e).
    const out = denseAttention({
      q: Float32Array.of(1, 1),
      k: Float32Array.of(0, 0, 1, 1),
      v: Float32Array.of(10, 0, 0, 10),
      numQueries: 1,
      numKeys: 2,
      numQHeads: 1,
      numKvHeads: 1,
      headDim: 2,
      scale: 0.5,
    });
    const w1 = Math.E / (1 + Math.E);
    expect(out[0]).toBeCloseTo(10 * (1 - w1), 5);
    expect(out[1]).toBeCloseTo(10 * w1, 5);
  });

  it('applies the soft-cap to the scaled score', () => {
    const cap = 0.5;
    const out = denseAttention({
      q: Float32Array.of(3),
      k: Float32Array.of(0, 1),
      v: Float32Array.of(0, 1),
      numQueries: 1,
      numKeys: 2,
      numQHeads: 1,
      numKvHeads: 1,
      headDim: 1,
      scale: 1,
      softCap: cap,
      causal: false,
    });
    const s1 = Math.tanh(3 / cap) * cap;
    expect(out[0]).toBeCloseTo(Math.exp(s1) / (1 + Math.exp(s1)), 5);
  });

  it('maps query heads to KV heads by group (GQA)', () => {
    // 4 query heads over 2 KV heads: heads 0,1 read KV head 0 and heads 2,3 read KV head 1.
    const v = Float32Array.of(1, 2); // one key, KV head 0 → 1, KV head 1 → 2 (headDim 1)
    const out = denseAttention({
      q: filled(4, () => 1),
      k: Float32Array.of(1, 1),
      v,
      numQueries: 1,
      numKeys: 1,
      numQHeads: 4,
      numKvHeads: 2,
      headDim: 1,
    });
    expect(Array.from(out)).toEqual([1, 1, 2, 2]);
  });

  it('lets every query see every key when not causal', () => {
    const out = denseAttention({
      q: new Float32Array(2),
      k: new Float32Array(3),
      v: Float32Array.of(3, 6, 9),
      numQueries: 2,
      numKeys: 3,
      numQHeads: 1,
      numKvHeads: 1,
      headDim: 1,
      causal: false,
    });
    expect(out[0]).toBeCloseTo(6, 6);
    expect(out[1]).toBeCloseTo(6, 6);
  });
});
