import type { BlockPool } from './block-pool.js';
import { KvAllocatorError } from './errors.js';
import type { CachedPrefix } from './types.js';

/** @throws {KvAllocatorError} INVALID_TOKEN naming the first token id that is not a u32. */
export function validateTokens(tokens: ArrayLike<number>): void {
  if (tokens === null || typeof tokens !== 'object' || typeof tokens.length !== 'number') {
    throw new KvAllocatorError('INVALID_TOKEN', 'token ids must be an array of integers');
  }
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i]!;
    if (!Number.isInteger(t) || t < 0 || t > 0xffffffff) {
      throw new KvAllocatorError(
        'INVALID_TOKEN',
        `token id at index ${i} is not a u32 integer: ${String(t)}`,
        {
          details: { index: i, token: t },
        },
      );
    }
  }
}

/**
 * Whether block `i` of `prefix` is a block id of `pool` that still holds the hash it was found
 * with.
 */
export function holdsPrefixBlock(pool: BlockPool, prefix: CachedPrefix, i: number): boolean {
  const b = prefix.blocks[i]!;
  return Number.isInteger(b) && b >= 0 && b < pool.numBlocks && pool.hashOf(b) === prefix.hashes[i];
}

/**
 * @throws {KvAllocatorError} INVALID_ARGUMENT for a malformed prefix; STALE_PREFIX when one of
 *   its blocks no longer holds the content it was found with.
 */
export function checkPrefix(pool: BlockPool, blockSize: number, prefix: CachedPrefix): void {
  if (prefix.blocks.length !== prefix.hashes.length) {
    throw new KvAllocatorError(
      'INVALID_ARGUMENT',
      'prefix.blocks and prefix.hashes differ in length',
    );
  }
  if (prefix.numTokens !== prefix.blocks.length * blockSize) {
    throw new KvAllocatorError(
      'INVALID_ARGUMENT',
      `prefix.numTokens (${prefix.numTokens}) must be blocks × blockSize (${prefix.blocks.length * blockSize})`,
    );
  }
  for (let i = 0; i < prefix.blocks.length; i++) {
    if (!holdsPrefixBlock(pool, prefix, i)) {
      const b = prefix.blocks[i]!;
      throw new KvAllocatorError(
        'STALE_PREFIX',
        `prefix block ${String(b)} no longer holds the cached content (evicted since findCachedPrefix?)`,
        { details: { index: i, block: b } },
      );
    }
  }
}
