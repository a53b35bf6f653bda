import type { SeededRandom } from '@kvasir/test-utils';
import { randomInt } from './random.js';

/**
 * Per-block attention mass written as plainly as possible: for each of the last `massQueries`
 * queries and each head, the causal softmax over the keys in f64, each probability added to
 * the block of its key. The ground truth of the paged references' `massOut`.
 */
export function denseAttentionMass(args: {
  q: Float32Array;
  k: Float32Array;
  numQueries: number;
  numKeys: number;
  numQHeads: number;
  numKvHeads: number;
  headDim: number;
  blockSize: number;
  massQueries: number;
  softCap?: number;
}): Float64Array {
  const { q, k, numQueries, numKeys, numQHeads, numKvHeads, headDim: D } = args;
  const out = new Float64Array(Math.ceil(numKeys / args.blockSize));
  const group = numQHeads / numKvHeads;
  for (let i = numQueries - args.massQueries; i < numQueries; i++) {
    const last = numKeys - numQueries + i;
    for (let h = 0; h < numQHeads; h++) {
      const kvh = Math.floor(h / group);
      const scores: number[] = [];
      for (let j = 0; j <= last; j++) {
        let dot = 0;
        for (let d = 0; d < D; d++)
          dot += q[(i * numQHeads + h) * D + d]! * k[(j * numKvHeads + kvh) * D + d]!;
        let s = dot / Math.sqrt(D);
        if (args.softCap !== undefined) s = Math.tanh(s / args.softCap) * args.softCap;
        scores.push(s);
      }
      const max = Math.max(...scores);
      const w = scores.map((s) => Math.exp(s - max));
      const total = w.reduce((a, b) => a + b, 0);
      w.forEach((x, j) => {
        const b = Math.floor(j / args.blockSize);
        out[b] = out[b]! + x / total;
      });
    }
  }
  return out;
}

/** Per sequence, a random number of mass queries in [0, queryLen] (0 = that row asks for none). */
export function randomMassQueries(rng: SeededRandom, queryLens: readonly number[]): Uint32Array {
  return Uint32Array.from(queryLens, (n) => randomInt(rng, n + 1));
}
