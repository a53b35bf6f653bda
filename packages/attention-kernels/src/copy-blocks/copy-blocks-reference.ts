import { AttentionKernelError } from '../errors.js';

/** Block copies: `[src, dst]` pairs, or a flat `[src0, dst0, src1, dst1, …]` array. */
export type BlockPairs = readonly (readonly [number, number])[] | Uint32Array | Int32Array;

/** Flatten `pairs` into `[src0, dst0, …]`. */
export function flattenPairs(pairs: BlockPairs): Uint32Array {
  if (pairs instanceof Uint32Array || pairs instanceof Int32Array) {
    if (pairs.length % 2 !== 0) {
      throw new AttentionKernelError(
        'SHAPE_MISMATCH',
        `A flat pair list needs an even length, got ${pairs.length}.`,
      );
    }
    if (pairs instanceof Int32Array && pairs.some((b) => b < 0)) {
      throw new AttentionKernelError('BLOCK_OUT_OF_RANGE', 'Block ids must not be negative.');
    }
    return Uint32Array.from(pairs);
  }
  const out = new Uint32Array(pairs.length * 2);
  pairs.forEach(([s, d], i) => {
    for (const b of [s, d]) {
      if (!Number.isInteger(b) || b < 0) {
        throw new AttentionKernelError(
          'BLOCK_OUT_OF_RANGE',
          `Block id ${b} in pair ${i} is not a non-negative integer.`,
        );
      }
    }
    out[2 * i] = s;
    out[2 * i + 1] = d;
  });
  return out;
}

/**
 * Check copies within one buffer of `numBlocks` blocks: ids in range, every destination
 * distinct, and no destination also a source (copies run in parallel, so either would make the
 * result depend on ordering). With `separateDestination` (copy into another buffer of
 * `dstBlocks` blocks) only ranges and distinct destinations are checked.
 *
 * @throws {AttentionKernelError} `BLOCK_OUT_OF_RANGE` or `INVALID_ARGUMENT`.
 */
export function checkBlockPairs(
  flat: Uint32Array,
  numBlocks: number,
  dstBlocks = numBlocks,
  separateDestination = false,
): void {
  const dsts = new Set<number>();
  for (let i = 0; i < flat.length; i += 2) {
    const s = flat[i]!;
    const d = flat[i + 1]!;
    if (s >= numBlocks || d >= dstBlocks) {
      throw new AttentionKernelError(
        'BLOCK_OUT_OF_RANGE',
        `Copy ${i / 2} (${s} → ${d}) is outside the cache (${numBlocks} source, ${dstBlocks} destination blocks).`,
        { details: { pair: i / 2, src: s, dst: d, numBlocks, dstBlocks } },
      );
    }
    if (dsts.has(d)) {
      throw new AttentionKernelError(
        'INVALID_ARGUMENT',
        `Block ${d} is the destination of two copies.`,
        {
          details: { dst: d },
        },
      );
    }
    dsts.add(d);
  }
  if (separateDestination) return;
  for (let i = 0; i < flat.length; i += 2) {
    const s = flat[i]!;
    if (dsts.has(s) && flat[i + 1] !== s) {
      throw new AttentionKernelError(
        'INVALID_ARGUMENT',
        `Block ${s} is both copied from and overwritten in one call; split the copies into two calls.`,
        { details: { block: s } },
      );
    }
  }
}

/**
 * CPU twin of `CopyBlocks`: copy whole blocks (`blockWords` words each, scales included) of one
 * layer's cache in place.
 *
 * @throws {AttentionKernelError} as {@link checkBlockPairs}; `SHAPE_MISMATCH` when the cache is
 *   not a whole number of blocks. Nothing is copied then.
 */
export function copyBlocksReference(
  cache: Uint32Array,
  blockWords: number,
  pairs: BlockPairs,
): void {
  if (cache.length % blockWords !== 0) {
    throw new AttentionKernelError(
      'SHAPE_MISMATCH',
      `cache of ${cache.length} words is not a whole number of ${blockWords}-word blocks.`,
    );
  }
  const flat = flattenPairs(pairs);
  checkBlockPairs(flat, cache.length / blockWords);
  for (let i = 0; i < flat.length; i += 2) {
    const s = flat[i]! * blockWords;
    cache.copyWithin(flat[i + 1]! * blockWords, s, s + blockWords);
  }
}
