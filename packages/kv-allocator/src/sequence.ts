import type { BlockPool } from './block-pool.js';
import { hashBlock } from './hash.js';
import type { BlockCopy, BlockHash, BlockId } from './types.js';

/** One sequence's block table, and what hashes its blocks as they fill. */
export interface Sequence {
  blocks: BlockId[];
  numTokens: number;
  /** Hash of the last full block, or the chain root. */
  lastHash: BlockHash;
  /** Token ids in the last, partially filled block (needed to hash it once full). */
  tail: number[];
  /**
   * Logical index of the first block dropped or rewritten (Infinity while none was): blocks from
   * here on were computed, or changed, without the context their hash chain names, so they are
   * never published as prefix blocks.
   */
  compressedFrom: number;
  /** Leading blocks released (holes, `-1`) because no later query's window reaches them. */
  released: number;
}

/** A sequence of `numTokens` tokens in `blocks`, whose last full block hashes to `lastHash`. */
export function newSequence(
  blocks: BlockId[],
  numTokens: number,
  lastHash: BlockHash,
  released = 0,
): Sequence {
  return {
    blocks,
    numTokens,
    lastHash,
    tail: [],
    compressedFrom: Number.POSITIVE_INFINITY,
    released,
  };
}

/** Marks `s` compressed from logical block `from` on (see {@link Sequence.compressedFrom}). */
export function markCompressed(s: Sequence, from: number): void {
  if (from < s.compressedFrom) s.compressedFrom = from;
  // Nothing is hashed any more, so the partial block's tokens need not be kept.
  s.tail.length = 0;
}

/**
 * Tokens the live sequences hold (each used block counted once even when shared, at its
 * fullest) and how many sequences are compressed.
 */
export function occupancy(
  seqs: Iterable<Sequence>,
  numBlocks: number,
  blockSize: number,
): { readonly tokens: number; readonly compressed: number } {
  const bs = blockSize;
  const fill = new Int32Array(numBlocks);
  let compressed = 0;
  for (const s of seqs) {
    if (s.compressedFrom !== Number.POSITIVE_INFINITY) compressed++;
    for (let i = s.released; i < s.blocks.length; i++) {
      const inBlock = Math.min(bs, s.numTokens - i * bs);
      const b = s.blocks[i]!;
      if (inBlock > fill[b]!) fill[b] = inBlock;
    }
  }
  let tokens = 0;
  for (let b = 0; b < numBlocks; b++) tokens += fill[b]!;
  return { tokens, compressed };
}

/**
 * Blocks appending `k` tokens to `seq` takes from the pool: new blocks, plus a copy of a shared,
 * partially filled last block (copy-on-write).
 */
export function growthOf(pool: BlockPool, seq: Sequence, k: number, blockSize: number): number {
  const cow =
    k > 0 &&
    seq.numTokens % blockSize !== 0 &&
    pool.refCount(seq.blocks[seq.blocks.length - 1]!) > 1
      ? 1
      : 0;
  return cow + Math.ceil((seq.numTokens + k) / blockSize) - seq.blocks.length;
}

/**
 * Appends tokens to `s`, whose blocks the pool has room for ({@link growthOf}): copies a shared
 * partial last block, takes new blocks, maps each token to its slot, and hashes (and, with
 * prefix caching, publishes) every block the tokens fill, unless `s` is compressed.
 */
export function appendTokens(
  pool: BlockPool,
  s: Sequence,
  tokens: ArrayLike<number>,
  blockSize: number,
  publishHashes: boolean,
): { slotMapping: Int32Array; copies: BlockCopy[] } {
  const bs = blockSize;
  const copies: BlockCopy[] = [];
  const k = tokens.length;
  if (k > 0 && s.numTokens % bs !== 0) {
    const last = s.blocks.length - 1;
    const shared = s.blocks[last]!;
    if (pool.refCount(shared) > 1) {
      const [copy] = pool.allocate(1)!;
      pool.release(shared);
      s.blocks[last] = copy!;
      copies.push({ src: shared, dst: copy! });
    }
  }
  const grow = Math.ceil((s.numTokens + k) / bs) - s.blocks.length;
  if (grow > 0) for (const b of pool.allocate(grow)!) s.blocks.push(b);

  const slotMapping = new Int32Array(k);
  const publish = s.compressedFrom === Number.POSITIVE_INFINITY;
  for (let i = 0; i < k; i++) {
    const pos = s.numTokens + i;
    const block = s.blocks[Math.floor(pos / bs)]!;
    slotMapping[i] = block * bs + (pos % bs);
    if (!publish) continue;
    s.tail.push(tokens[i]!);
    if (s.tail.length === bs) {
      const hash = hashBlock(s.lastHash, s.tail, 0, bs);
      if (publishHashes) {
        // The first block of a chain has no parent (its hash chains on the seed's root).
        pool.setHash(block, hash, pos < bs ? undefined : s.lastHash, s.tail);
      }
      s.lastHash = hash;
      s.tail.length = 0;
    }
  }
  s.numTokens += k;
  return { slotMapping, copies };
}
