// Blocks whose KV was computed elsewhere (an offload tier, another replica), brought into the
// pool as a transaction: reserve (held, not findable), write their content, then commit
// (published as cached prefix blocks) or abort (freed).
import type { BlockPool } from './block-pool.js';
import { KvAllocatorError } from './errors.js';
import type { BlockHash, BlockId, CachedPrefix } from './types.js';

/** Blocks reserved by `KvCacheManager.reserveExternal` for KV computed elsewhere. */
export interface ExternalBlocks {
  /** Index of the first reserved block in the token sequence's block chain. */
  readonly firstBlock: number;
  /** The reserved physical blocks, in chain order: write content into these. */
  readonly blocks: readonly BlockId[];
  /** The hash each block will be published under. */
  readonly hashes: readonly BlockHash[];
  /** The hash of the block before the first reserved one (undefined when that is the first). */
  readonly parent?: BlockHash;
  /** The reserved blocks' tokens, block after block, when known (for block events). */
  readonly tokens?: readonly number[];
}

/**
 * Reserves blocks for the chain's hashes after the local prefix `local`, at most `maxBlocks`,
 * stopping before a hash some block already holds. Undefined when there is nothing to reserve
 * or no room; the local prefix is never reclaimed to make room.
 */
export function reserveExternal(
  pool: BlockPool,
  local: CachedPrefix,
  chain: readonly BlockHash[],
  maxBlocks: number,
  tokens?: ArrayLike<number>,
  blockSize = 0,
): ExternalBlocks | undefined {
  const first = local.blocks.length;
  const hashes: BlockHash[] = [];
  for (let i = first; i < chain.length; i++) {
    const hash = chain[i]!;
    // One block per hash: stop before content some block already holds.
    if (hashes.length >= maxBlocks || pool.lookup(hash) !== undefined) break;
    hashes.push(hash);
  }
  if (hashes.length === 0) return undefined;
  for (const b of local.blocks) pool.retain(b);
  const blocks = pool.allocate(hashes.length);
  for (const b of local.blocks) pool.release(b);
  if (!blocks) return undefined;
  return {
    firstBlock: first,
    blocks,
    hashes,
    ...(first > 0 ? { parent: chain[first - 1]! } : {}),
    ...(tokens === undefined
      ? {}
      : {
          tokens: Array.from(tokens).slice(first * blockSize, (first + blocks.length) * blockSize),
        }),
  };
}

/**
 * Publishes reserved blocks whose content has been written.
 * @throws {KvAllocatorError} INVALID_ARGUMENT for a block that is not reserved.
 */
export function commitExternal(pool: BlockPool, reserved: ExternalBlocks): void {
  reserved.blocks.forEach((block, i) => {
    if (pool.refCount(block) !== 1 || pool.hashOf(block) !== undefined) {
      throw new KvAllocatorError('INVALID_ARGUMENT', `block ${block} is not a reserved block`);
    }
    const index = reserved.firstBlock + i;
    const parent = i > 0 ? reserved.hashes[i - 1] : reserved.parent;
    const per = reserved.tokens === undefined ? 0 : reserved.tokens.length / reserved.blocks.length;
    pool.setHash(
      block,
      reserved.hashes[i]!,
      index === 0 ? undefined : parent,
      reserved.tokens?.slice(i * per, (i + 1) * per),
    );
    pool.release(block);
  });
}

/** Frees reserved blocks whose content could not be written. */
export function abortExternal(pool: BlockPool, reserved: ExternalBlocks): void {
  for (const block of reserved.blocks) pool.release(block, false);
}
