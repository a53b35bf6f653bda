// KV cache groups: layers whose KV is allocated together. A group of full-attention layers keeps
// every block of a sequence; a sliding-window group releases the blocks wholly before the window
// of the sequence's next query (a hole stays in its table, so positions and slots never move)
// and needs only the window's blocks of a cached prefix (vLLM's SlidingWindowManager, adapted).
import type { BlockPool } from './block-pool.js';
import { KvAllocatorError } from './errors.js';
import type { Sequence } from './sequence.js';
import type { BlockId, ExtraKeys, KvGroupSpec } from './types.js';

/** A released block's place in a sliding group's block table. */
export const HOLE: BlockId = -1;

/**
 * The windows of `groups` (null: full attention), checked.
 * @throws {KvAllocatorError} INVALID_ARGUMENT for an empty list or a window that is not a
 *   positive integer.
 */
export function groupWindows(groups: readonly KvGroupSpec[] | undefined): (number | null)[] {
  if (groups === undefined) return [null];
  if (!Array.isArray(groups) || groups.length === 0) {
    throw new KvAllocatorError('INVALID_ARGUMENT', 'groups must be a non-empty array');
  }
  return groups.map((g, i) => {
    const w = g?.window ?? null;
    if (w !== null && !(Number.isInteger(w) && w >= 1)) {
      throw new KvAllocatorError(
        'INVALID_ARGUMENT',
        `groups[${i}].window must be a positive integer or null, got ${String(w)}`,
        { details: { group: i, window: w } },
      );
    }
    return w;
  });
}

/** The extra keys group `g`'s hash chains are rooted on: group 0 keeps the plain chain. */
export function groupExtraKeys(extraKeys: ExtraKeys | undefined, g: number): ExtraKeys | undefined {
  return g === 0 ? extraKeys : { ...extraKeys, kvGroup: g };
}

/**
 * Leading logical blocks no query at position `next` or later reads under `window`: a query at
 * `p` reads keys `p - window + 1 .. p`, so block `i` is out when `(i + 1) · blockSize ≤
 * next + 1 − window`.
 */
export function blocksBeforeWindow(next: number, window: number | null, blockSize: number): number {
  if (window === null) return 0;
  return Math.max(0, Math.floor((next + 1 - window) / blockSize));
}

/** The end of the run of `s`'s blocks a sliding group may release before its next token. */
function releaseEnd(s: Sequence, window: number | null, blockSize: number): number {
  return Math.min(blocksBeforeWindow(s.numTokens, window, blockSize), s.blocks.length);
}

/**
 * Blocks {@link releaseBeforeWindow} would return to the available set now: those only `s`
 * holds (a block a fork still references stays in use).
 */
export function freeableBeforeWindow(
  pool: BlockPool,
  s: Sequence,
  window: number | null,
  blockSize: number,
): number {
  let n = 0;
  const end = releaseEnd(s, window, blockSize);
  for (let i = s.released; i < end; i++) if (pool.refCount(s.blocks[i]!) === 1) n++;
  return n;
}

/**
 * Releases the blocks of `s` that no later query reads (see {@link blocksBeforeWindow}),
 * leaving holes. A released full, hashed block stays cached under its hash, unless it was
 * computed after a compression (`compressedFrom`). Returns how many were released.
 */
export function releaseBeforeWindow(
  pool: BlockPool,
  s: Sequence,
  window: number | null,
  blockSize: number,
): number {
  const end = releaseEnd(s, window, blockSize);
  const from = s.released;
  for (let i = end - 1; i >= from; i--) {
    pool.release(s.blocks[i]!, i < s.compressedFrom);
    s.blocks[i] = HOLE;
  }
  if (end > from) s.released = end;
  return Math.max(0, end - from);
}

/**
 * The longest hit, at most `m` blocks, a group can serve from `cached` (whether each block of
 * the chain is in the pool): a full group needs every block from the start; a sliding group
 * only those the window of the query right after the hit reads. Scans from the right: a miss
 * at `j` rules out every hit longer than `j` whose window reaches it.
 */
export function groupHitBlocks(
  cached: readonly boolean[],
  m: number,
  window: number | null,
  blockSize: number,
): number {
  if (window === null) {
    let k = 0;
    while (k < m && cached[k]) k++;
    return k;
  }
  let k = m;
  while (k > 0) {
    const lo = blocksBeforeWindow(k * blockSize, window, blockSize);
    let miss = -1;
    for (let j = k - 1; j >= lo; j--) {
      if (!cached[j]) {
        miss = j;
        break;
      }
    }
    if (miss < 0) return k;
    k = miss;
  }
  return 0;
}
