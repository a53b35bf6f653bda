import type { BlockPool } from './block-pool.js';
import type { BlockHash, BlockId } from './types.js';

/** Read-only view of the block pool behind a `KvCacheManager`. */
export interface BlockPoolView {
  refCount(block: BlockId): number;
  /** The content hash of a full block, if it has one. */
  hashOf(block: BlockId): BlockHash | undefined;
  /** The block holding content `hash`, if cached or in use. */
  lookup(hash: BlockHash): BlockId | undefined;
  readonly numFree: number;
  readonly numCached: number;
  readonly numUsed: number;
}

/** A view of `pool` that can read it and nothing else. */
export function blockPoolView(pool: BlockPool): BlockPoolView {
  return {
    refCount: (block) => pool.refCount(block),
    hashOf: (block) => pool.hashOf(block),
    lookup: (hash) => pool.lookup(hash),
    get numFree() {
      return pool.numFree;
    },
    get numCached() {
      return pool.numCached;
    },
    get numUsed() {
      return pool.numUsed;
    },
  };
}
