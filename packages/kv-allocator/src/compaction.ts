// Token-level KV compression's side of the allocator: blocks leave a live sequence's table
// (`dropBlocks`) or are made private before the executor rewrites them in place
// (`prepareRewrite`). Either way the sequence stops publishing prefix blocks from there on.
import type { BlockPool } from './block-pool.js';
import { KvAllocatorError } from './errors.js';
import { markCompressed, type Sequence } from './sequence.js';
import type { BlockCopy, SeqId } from './types.js';

/**
 * Releases the listed logical blocks of `s` (none its last) and compacts its table; see
 * `KvCacheManager.dropBlocks`. Returns how many blocks were dropped.
 * @throws {KvAllocatorError} INVALID_ARGUMENT (nothing changed) for a bad index.
 */
export function dropBlocks(
  pool: BlockPool,
  blockSize: number,
  seqId: SeqId,
  s: Sequence,
  logicalBlocks: readonly number[],
): number {
  const sorted = checkLogicalBlocks(seqId, s, logicalBlocks, s.blocks.length - 1);
  if (sorted.length === 0) return 0;
  // Highest index first, as `free` does: under LRU the older blocks are reclaimed last.
  for (let j = sorted.length - 1; j >= 0; j--) pool.release(s.blocks[sorted[j]!]!);
  let out = 0;
  let j = 0;
  for (let i = 0; i < s.blocks.length; i++) {
    if (i === sorted[j]) j++;
    else s.blocks[out++] = s.blocks[i]!;
  }
  s.blocks.length = out;
  s.numTokens -= sorted.length * blockSize;
  markCompressed(s, sorted[0]!);
  return sorted.length;
}

/**
 * Makes the listed logical blocks of `s` private and unpublished before an in-place rewrite;
 * see `KvCacheManager.prepareRewrite`. Returns the copy-on-write copies to run first.
 * @throws {KvAllocatorError} INVALID_ARGUMENT for a bad index; OUT_OF_BLOCKS when the copies
 *   cannot be allocated. Nothing changes when it throws.
 */
export function prepareRewrite(
  pool: BlockPool,
  seqId: SeqId,
  s: Sequence,
  logicalBlocks: readonly number[],
): BlockCopy[] {
  const sorted = checkLogicalBlocks(seqId, s, logicalBlocks, s.blocks.length);
  if (sorted.length === 0) return [];
  let shared = 0;
  for (const i of sorted) if (pool.refCount(s.blocks[i]!) > 1) shared++;
  const fresh = shared > 0 ? pool.allocate(shared) : [];
  if (!fresh) {
    throw new KvAllocatorError(
      'OUT_OF_BLOCKS',
      `rewriting ${sorted.length} blocks of sequence ${String(seqId)} needs ${shared} copies, ${pool.numAvailable} blocks are available`,
      { details: { seqId, needed: shared, available: pool.numAvailable } },
    );
  }
  const copies: BlockCopy[] = [];
  for (const i of sorted) {
    const src = s.blocks[i]!;
    if (pool.refCount(src) > 1) {
      const dst = fresh[copies.length]!;
      pool.release(src);
      s.blocks[i] = dst;
      copies.push({ src, dst });
    } else if (pool.hashOf(src) !== undefined) {
      pool.unpublish(src);
    }
  }
  markCompressed(s, sorted[0]!);
  return copies;
}

/**
 * `logicalBlocks` sorted ascending, after checking each is a distinct integer in [0, limit).
 * @throws {KvAllocatorError} INVALID_ARGUMENT naming the bad entry.
 */
function checkLogicalBlocks(
  seqId: SeqId,
  s: Sequence,
  logicalBlocks: readonly number[],
  limit: number,
): number[] {
  if (!Array.isArray(logicalBlocks)) {
    throw new KvAllocatorError('INVALID_ARGUMENT', 'logicalBlocks must be an array of indices');
  }
  const sorted = [...logicalBlocks].sort((a, b) => a - b);
  for (let j = 0; j < sorted.length; j++) {
    const i = sorted[j]!;
    let why: string | undefined;
    if (!Number.isInteger(i) || i < 0) why = 'is not a block index';
    else if (i >= limit) {
      why =
        i === s.blocks.length - 1
          ? 'is the last block (it is still being filled)'
          : `is past the block table (${s.blocks.length} blocks)`;
    } else if (j > 0 && sorted[j - 1] === i) why = 'is listed twice';
    if (why) {
      throw new KvAllocatorError(
        'INVALID_ARGUMENT',
        `logical block ${String(i)} of sequence ${String(seqId)} ${why}`,
        { details: { seqId, logicalBlock: i } },
      );
    }
  }
  return sorted;
}
