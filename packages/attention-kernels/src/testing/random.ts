// Test and bench generators of paged-cache inputs, built on @kvasir/test-utils' seeded RNG.

import { randomFloats, type SeededRandom } from '@kvasir/test-utils';
import type { KvCacheLayout } from '../layout.js';

/** An integer uniform in [0, n). */
export function randomInt(rng: SeededRandom, n: number): number {
  return Math.floor(rng() * n);
}

/** A Fisher-Yates shuffle of 0..n-1. */
export function shuffledRange(rng: SeededRandom, n: number): number[] {
  const a = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = randomInt(rng, i + 1);
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a;
}

/**
 * A cache of `numBlocks` blocks whose every row holds random values in [-scale, scale),
 * encoded with the layout's format (so it is valid for every format, scales included).
 */
export function randomCache(
  rng: SeededRandom,
  layout: KvCacheLayout,
  numBlocks: number,
  scale = 1,
): Uint32Array {
  const cache = new Uint32Array(numBlocks * layout.blockWords);
  for (let b = 0; b < numBlocks; b++) {
    for (let s = 0; s < layout.numKvHeads * 2; s++) {
      const slab = b * layout.blockWords + s * layout.slabWords;
      for (let t = 0; t < layout.blockSize; t++) {
        layout.format.encodeRow(
          cache,
          slab,
          t,
          randomFloats(rng, layout.headDim, scale),
          layout.blockSize,
        );
      }
    }
  }
  return cache;
}

/**
 * Block tables for sequences of the given context lengths over shuffled, non-contiguous
 * physical blocks: returns the padded table `[numSeqs][maxBlocksPerSeq]` (padding 0) and the
 * number of blocks used. Needs `numBlocks` ≥ the blocks the lengths require.
 */
export function randomBlockTables(
  rng: SeededRandom,
  contextLens: readonly number[],
  blockSize: number,
  numBlocks: number,
  maxBlocksPerSeq = Math.max(1, ...contextLens.map((l) => Math.ceil(l / blockSize))),
): { blockTables: Uint32Array; maxBlocksPerSeq: number } {
  const free = shuffledRange(rng, numBlocks);
  const blockTables = new Uint32Array(contextLens.length * maxBlocksPerSeq);
  contextLens.forEach((len, s) => {
    const need = Math.ceil(len / blockSize);
    for (let i = 0; i < need; i++) {
      const b = free.pop();
      if (b === undefined) throw new Error(`randomBlockTables: ${numBlocks} blocks are too few`);
      blockTables[s * maxBlocksPerSeq + i] = b;
    }
  });
  return { blockTables, maxBlocksPerSeq };
}

/**
 * A slot mapping for `numTokens` new tokens spread over shuffled blocks, with roughly
 * `skipRate` of them set to -1 (padding).
 */
export function randomSlotMapping(
  rng: SeededRandom,
  numTokens: number,
  numBlocks: number,
  blockSize: number,
  skipRate = 0,
): Int32Array {
  const slots = shuffledRange(rng, numBlocks * blockSize);
  const out = new Int32Array(numTokens);
  for (let i = 0; i < numTokens; i++) out[i] = rng() < skipRate ? -1 : slots[i]!;
  return out;
}

/** Largest |a[i] - b[i]| (NaN when a NaN appears on one side only). */
export function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) throw new Error(`length ${a.length} vs ${b.length}`);
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    const x = a[i]!;
    const y = b[i]!;
    if (Number.isNaN(x) !== Number.isNaN(y)) return Number.NaN;
    if (!Number.isNaN(x)) m = Math.max(m, Math.abs(x - y));
  }
  return m;
}
