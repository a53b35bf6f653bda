// Seeded request workloads for the allocator benchmark.

import { seededRandom } from '@kvasir/test-utils';

/** The workspace's one seeded test generator (mulberry32), under this file's old name. */
export const rng = seededRandom;

function logNormal(rand: () => number, median: number, sigma: number): number {
  const u = Math.max(rand(), 1e-12);
  const z = Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * rand());
  return median * Math.exp(sigma * z);
}

export interface BenchRequest {
  prompt: number[];
  outputLen: number;
}

/**
 * ShareGPT-like long-tailed lengths (the PagedAttention paper's ShareGPT: mean input ≈ 161,
 * mean output ≈ 338 tokens), clipped so prompt + output ≤ maxLen.
 */
export function shareGptLike(count: number, maxLen: number, seed: number): BenchRequest[] {
  const rand = rng(seed);
  const out: BenchRequest[] = [];
  for (let i = 0; i < count; i++) {
    const promptLen = Math.max(4, Math.min(maxLen - 16, Math.round(logNormal(rand, 90, 1.0))));
    const outputLen = Math.max(
      1,
      Math.min(maxLen - promptLen, Math.round(logNormal(rand, 220, 0.9))),
    );
    const prompt = Array.from({ length: promptLen }, () => Math.floor(rand() * 32000));
    out.push({ prompt, outputLen });
  }
  return out;
}
