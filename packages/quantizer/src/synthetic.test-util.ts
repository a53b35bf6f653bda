// Seeded synthetic K/V for tests and the benchmark: Gaussian values, and for keys a few outlier
// channels with large magnitude and offset, as real LLM keys have (KIVI, KVQuant).

import { seededRandom } from '@kvasir/test-utils';

/** The workspace's one seeded test generator (mulberry32), under this file's old name. */
export const rng = seededRandom;

/** Standard normal samples (Box–Muller). */
export function gaussian(n: number, seed: number, std = 1): Float32Array {
  const r = rng(seed);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i += 2) {
    const u = Math.max(r(), 1e-12);
    const v = r();
    const mag = std * Math.sqrt(-2 * Math.log(u));
    out[i] = mag * Math.cos(2 * Math.PI * v);
    if (i + 1 < n) out[i + 1] = mag * Math.sin(2 * Math.PI * v);
  }
  return out;
}

/**
 * Keys `[tokens][heads][headDim]` with outlier channels: every `outlierEvery`-th channel gets
 * `outlierScale`× the magnitude and a constant offset of the same size.
 */
export function keysWithOutliers(
  tokens: number,
  heads: number,
  headDim: number,
  seed: number,
  outlierEvery = 16,
  outlierScale = 12,
): Float32Array {
  const k = gaussian(tokens * heads * headDim, seed);
  for (let t = 0; t < tokens; t++) {
    for (let h = 0; h < heads; h++) {
      for (let d = (seed + h) % outlierEvery; d < headDim; d += outlierEvery) {
        const i = (t * heads + h) * headDim + d;
        k[i] = k[i]! * outlierScale + outlierScale * (d % 2 === 0 ? 1 : -1);
      }
    }
  }
  return k;
}
