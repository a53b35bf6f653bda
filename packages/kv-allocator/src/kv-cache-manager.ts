import { BlockPool } from './block-pool.js';
import { assertInteger, KvAllocatorError } from './errors.js';
import { hashBlock, rootHash } from './hash.js';
import type { EvictionPolicy } from './policies/eviction-policy.js';
import type {
  AllocateResult,
  BlockCopy,
  BlockHash,
  BlockId,
  CachedPrefix,
  ExtraKeys,
  KvCacheStats,
  SeqId,
} from './types.js';

/** Options of `KvCacheManager`. */
export interface KvCacheManagerOptions {
  /** Physical blocks in the pool. */
  readonly numBlocks: number;
  /** Tokens per block. Default 16. */
  readonly blockSize?: number;
  /** Keep freed full blocks cached and serve prefixes from them. Default true. */
  readonly enablePrefixCaching?: boolean;
  /** Which cached block is reclaimed first. Default `LruPolicy`. */
  readonly evictionPolicy?: EvictionPolicy<BlockId>;
  /**
   * Seed of every hash chain. Engines sharing blocks (through a shared offload tier) must use
   * the same seed; anything else may use the default.
   */
  readonly hashSeed?: string;
}

/** Read-only view of the block pool behind a {@link KvCacheManager}. */
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

/** Blocks reserved by `KvCacheManager.reserveExternal` for KV computed elsewhere. */
export interface ExternalBlocks {
  /** Index of the first reserved block in the token sequence's block chain. */
  readonly firstBlock: number;
  /** The reserved physical blocks, in chain order: write content into these. */
  readonly blocks: readonly BlockId[];
  /** The hash each block will be published under. */
  readonly hashes: readonly BlockHash[];
}

/** Options of `KvCacheManager.free`. */
export interface FreeOptions {
  /**
   * Keep the sequence's full blocks cached for prefix reuse (default true). False when their
   * content was never written or cannot be trusted.
   */
  readonly keepCached?: boolean;
}

/** Options of `KvCacheManager.allocateSlots`. */
export interface AllocateOptions {
  /** On a sequence's first call: cached blocks to adopt before the new tokens. */
  readonly prefix?: CachedPrefix;
  /** On a sequence's first call: what besides tokens changes the KV (model, adapter, salt). */
  readonly extraKeys?: ExtraKeys;
}

interface Sequence {
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
}

const EMPTY_PREFIX: CachedPrefix = Object.freeze({ numTokens: 0, blocks: [], hashes: [] });
const RECENTLY_FREED_CAPACITY = 4096;

/**
 * Per-sequence block tables over a `BlockPool`, with prefix caching, fork and copy-on-write.
 *
 * The flow for one request: `findCachedPrefix(prompt)` → `allocateSlots(seq, rest, { prefix })`
 * → every step `allocateSlots(seq, [newToken])` → `free(seq)`. A full block is hashed (chaining
 * its parent's hash) as soon as its last token is allocated, so another sequence scheduled in a
 * later step can share it; the executor writes its KV in the same step, before any reader.
 */
export class KvCacheManager {
  readonly blockSize: number;
  readonly numBlocks: number;
  readonly enablePrefixCaching: boolean;
  private readonly pool: BlockPool;
  /** What the pool holds, read-only: reference counts, hashes, counts. */
  readonly blocks: BlockPoolView;
  private readonly seed: string;
  private readonly seqs = new Map<SeqId, Sequence>();
  private readonly recentlyFreed = new Set<SeqId>();
  private queries = 0;
  private queryTokens = 0;
  private hitTokens = 0;
  private droppedBlocks = 0;
  private rewriteCopies = 0;

  /** @throws {KvAllocatorError} INVALID_ARGUMENT for bad sizes. */
  constructor(options: KvCacheManagerOptions) {
    const blockSize = options.blockSize ?? 16;
    assertInteger('blockSize', blockSize, 1);
    this.blockSize = blockSize;
    this.pool = new BlockPool({
      numBlocks: options.numBlocks,
      ...(options.evictionPolicy ? { evictionPolicy: options.evictionPolicy } : {}),
    });
    this.numBlocks = this.pool.numBlocks;
    const pool = this.pool;
    this.blocks = {
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
    this.enablePrefixCaching = options.enablePrefixCaching ?? true;
    this.seed = options.hashSeed ?? 'kvasir';
  }

  /**
   * Hashes of every full block of `tokens` under `extraKeys`, in order (the chain the prefix
   * cache and offload tiers are keyed by).
   * @throws {KvAllocatorError} INVALID_TOKEN for a token id that is not a u32 integer.
   */
  blockHashes(tokens: ArrayLike<number>, extraKeys?: ExtraKeys): BlockHash[] {
    const out: BlockHash[] = [];
    let parent = rootHash(this.seed, extraKeys);
    const full = Math.floor(tokens.length / this.blockSize);
    for (let i = 0; i < full; i++) {
      parent = hashBlock(parent, tokens, i * this.blockSize, this.blockSize);
      out.push(parent);
    }
    return out;
  }

  /**
   * The longest run of cached full blocks that starts `tokens`. Changes no block state; counts
   * one prefix query in `stats()` unless `options.record` is false (for lookups that only rank
   * or re-check requests, so they do not inflate the hit rate). A prefix shorter than one block
   * never hits.
   * @throws {KvAllocatorError} INVALID_TOKEN for a token id that is not a u32 integer.
   */
  findCachedPrefix(
    tokens: ArrayLike<number>,
    extraKeys?: ExtraKeys,
    options: { readonly record?: boolean } = {},
  ): CachedPrefix {
    const record = options.record ?? true;
    if (record) {
      this.queries++;
      this.queryTokens += tokens.length;
    }
    if (!this.enablePrefixCaching) return EMPTY_PREFIX;
    const blocks: BlockId[] = [];
    const hashes: BlockHash[] = [];
    let parent = rootHash(this.seed, extraKeys);
    const full = Math.floor(tokens.length / this.blockSize);
    for (let i = 0; i < full; i++) {
      const hash = hashBlock(parent, tokens, i * this.blockSize, this.blockSize);
      const block = this.pool.lookup(hash);
      if (block === undefined) break;
      blocks.push(block);
      hashes.push(hash);
      parent = hash;
    }
    const numTokens = blocks.length * this.blockSize;
    if (record) this.hitTokens += numTokens;
    return { numTokens, blocks, hashes };
  }

  /**
   * Whether every block of `prefix` still holds the content it was found with (it may have been
   * reclaimed by allocations since `findCachedPrefix`). `allocateSlots` throws `STALE_PREFIX`
   * for a prefix for which this is false.
   */
  isPrefixValid(prefix: CachedPrefix): boolean {
    if (prefix.blocks.length !== prefix.hashes.length) return false;
    for (let i = 0; i < prefix.blocks.length; i++) {
      const b = prefix.blocks[i]!;
      if (!Number.isInteger(b) || b < 0 || b >= this.numBlocks) return false;
      if (this.pool.hashOf(b) !== prefix.hashes[i]) return false;
    }
    return true;
  }

  /** Blocks that can be handed out now: free plus reclaimable cached ones. */
  numAvailableBlocks(): number {
    return this.pool.numAvailable;
  }

  /**
   * Blocks `allocateSlots(seqId, <numNewTokens tokens>, { prefix })` would take from the free
   * or reclaimable set: new blocks, a copy-on-write copy, and adopted prefix blocks that are
   * cached but unreferenced (they stop being reclaimable). Pure.
   * @throws {KvAllocatorError} INVALID_ARGUMENT for a negative or non-integer count.
   */
  numBlocksToAllocate(seqId: SeqId, numNewTokens: number, prefix?: CachedPrefix): number {
    assertInteger('numNewTokens', numNewTokens);
    const seq = this.seqs.get(seqId);
    if (!seq) {
      const p = prefix ?? EMPTY_PREFIX;
      let adopted = 0;
      for (const b of p.blocks) if (this.pool.refCount(b) === 0) adopted++;
      return adopted + this.blocksFor(p.numTokens + numNewTokens) - p.blocks.length;
    }
    return this.growthOf(seq, numNewTokens);
  }

  /**
   * Makes room for `newTokenIds` at the end of `seqId` and returns their slots
   * (slot = block × blockSize + offset). The first call for an unknown id creates the sequence,
   * adopting `options.prefix` (from `findCachedPrefix`) when given; the new tokens follow it.
   * When the last block is shared (after `fork`) and partially filled, it is copied first
   * (copy-on-write) and the copy is returned for the executor to run before the step.
   *
   * Returns `{ ok: false }` without changing anything when the pool cannot supply the blocks.
   * @throws {KvAllocatorError} INVALID_TOKEN for non-integer token ids; STALE_PREFIX when the
   *   prefix's blocks no longer hold the hashed content; INVALID_ARGUMENT when a prefix is
   *   passed for an existing sequence.
   */
  allocateSlots(
    seqId: SeqId,
    newTokenIds: ArrayLike<number>,
    options: AllocateOptions = {},
  ): AllocateResult {
    validateTokens(newTokenIds);
    let seq = this.seqs.get(seqId);
    const isNew = seq === undefined;
    const prefix = options.prefix ?? EMPTY_PREFIX;
    if (!isNew && options.prefix && options.prefix.blocks.length > 0) {
      throw new KvAllocatorError(
        'INVALID_ARGUMENT',
        `sequence ${String(seqId)} already exists; a prefix can only be adopted on its first allocation`,
        { details: { seqId } },
      );
    }
    if (isNew) this.checkPrefix(prefix);

    const needed = isNew
      ? this.numBlocksToAllocate(seqId, newTokenIds.length, prefix)
      : this.growthOf(seq!, newTokenIds.length);
    const available = this.pool.numAvailable;
    if (needed > available) {
      return {
        ok: false,
        reason: 'NO_FREE_BLOCKS',
        blocksNeeded: needed,
        blocksAvailable: available,
      };
    }

    if (isNew) {
      for (const b of prefix.blocks) this.pool.retain(b);
      seq = {
        blocks: [...prefix.blocks],
        numTokens: prefix.numTokens,
        lastHash:
          prefix.hashes.length > 0
            ? prefix.hashes[prefix.hashes.length - 1]!
            : rootHash(this.seed, options.extraKeys),
        tail: [],
        compressedFrom: Number.POSITIVE_INFINITY,
      };
      this.seqs.set(seqId, seq);
      this.recentlyFreed.delete(seqId);
    }
    const s = seq!;
    const copies: BlockCopy[] = [];
    const k = newTokenIds.length;
    if (k > 0 && s.numTokens % this.blockSize !== 0) {
      const last = s.blocks.length - 1;
      const shared = s.blocks[last]!;
      if (this.pool.refCount(shared) > 1) {
        const [copy] = this.pool.allocate(1)!;
        this.pool.release(shared);
        s.blocks[last] = copy!;
        copies.push({ src: shared, dst: copy! });
      }
    }
    const grow = this.blocksFor(s.numTokens + k) - s.blocks.length;
    if (grow > 0) for (const b of this.pool.allocate(grow)!) s.blocks.push(b);

    const slotMapping = new Int32Array(k);
    const bs = this.blockSize;
    const publish = s.compressedFrom === Number.POSITIVE_INFINITY;
    for (let i = 0; i < k; i++) {
      const pos = s.numTokens + i;
      const block = s.blocks[Math.floor(pos / bs)]!;
      slotMapping[i] = block * bs + (pos % bs);
      if (!publish) continue;
      s.tail.push(newTokenIds[i]!);
      if (s.tail.length === bs) {
        const hash = hashBlock(s.lastHash, s.tail, 0, bs);
        if (this.enablePrefixCaching) this.pool.setHash(block, hash);
        s.lastHash = hash;
        s.tail.length = 0;
      }
    }
    s.numTokens += k;
    return { ok: true, slotMapping, copies };
  }

  /**
   * Makes `child` share every block of `parent` by reference (parallel sampling, beam search).
   * The first write into a shared, partially filled last block copies it.
   * @throws {KvAllocatorError} UNKNOWN_SEQUENCE for an unknown parent; SEQUENCE_EXISTS when the
   *   child id is taken.
   */
  fork(parent: SeqId, child: SeqId): void {
    const p = this.get(parent);
    if (this.seqs.has(child)) {
      throw new KvAllocatorError('SEQUENCE_EXISTS', `sequence ${String(child)} already exists`, {
        details: { seqId: child },
      });
    }
    for (const b of p.blocks) this.pool.retain(b);
    this.seqs.set(child, {
      blocks: [...p.blocks],
      numTokens: p.numTokens,
      lastHash: p.lastHash,
      tail: [...p.tail],
      compressedFrom: p.compressedFrom,
    });
    this.recentlyFreed.delete(child);
  }

  /**
   * Releases a sequence's blocks, last block first (so under LRU a prefix's tail is reclaimed
   * before its head). Full blocks stay cached for reuse until reclaimed, unless
   * `keepCached` is false: then the blocks only this sequence held are freed and forget their
   * hashes (their content cannot be trusted, e.g. the step that was to write it failed), while
   * blocks other sequences still hold keep theirs. A compressed sequence (see `dropBlocks`)
   * frees its blocks from the first dropped index on as if `keepCached` were false.
   * @throws {KvAllocatorError} DOUBLE_FREE for a sequence freed before; UNKNOWN_SEQUENCE for
   *   one never seen.
   */
  free(seqId: SeqId, options: FreeOptions = {}): void {
    const s = this.get(seqId);
    const keep = options.keepCached ?? true;
    for (let i = s.blocks.length - 1; i >= 0; i--) {
      this.pool.release(s.blocks[i]!, keep && i < s.compressedFrom);
    }
    this.seqs.delete(seqId);
    this.recentlyFreed.add(seqId);
    if (this.recentlyFreed.size > RECENTLY_FREED_CAPACITY) {
      for (const old of this.recentlyFreed) {
        this.recentlyFreed.delete(old);
        break;
      }
    }
  }

  /**
   * Releases blocks of a live sequence that are not its last block (token-level compression:
   * sinks + window, H2O, SnapKV). `logicalBlocks` are distinct indices into the sequence's
   * current block table, each below its last index. The table compacts (kept blocks keep their
   * order) and `numTokens(seqId)` drops by `blockSize` per block. A released block loses this
   * sequence's reference: it is freed, or stays cached when it is full, hashed and referenced by
   * nobody else (its content still is what its hash names).
   *
   * From the first dropped index on, the sequence is compressed: blocks that fill later are not
   * hashed or published as a prefix, and `free()` keeps cached only the blocks before that
   * index (the kept blocks after it were computed with a context that is gone).
   * @throws {KvAllocatorError} UNKNOWN_SEQUENCE; INVALID_ARGUMENT (nothing changed) for an
   *   index that is not an integer in range, the last block, or a repeat.
   */
  dropBlocks(seqId: SeqId, logicalBlocks: readonly number[]): void {
    const s = this.get(seqId);
    const sorted = this.checkLogicalBlocks(seqId, s, logicalBlocks, s.blocks.length - 1);
    if (sorted.length === 0) return;
    // Highest index first, as `free` does: under LRU the older blocks are reclaimed last.
    for (let j = sorted.length - 1; j >= 0; j--) this.pool.release(s.blocks[sorted[j]!]!);
    let out = 0;
    let j = 0;
    for (let i = 0; i < s.blocks.length; i++) {
      if (i === sorted[j]) j++;
      else s.blocks[out++] = s.blocks[i]!;
    }
    s.blocks.length = out;
    s.numTokens -= sorted.length * this.blockSize;
    this.droppedBlocks += sorted.length;
    this.markCompressed(s, sorted[0]!);
  }

  /**
   * Makes the listed logical blocks private to this sequence and unpublished, before the
   * executor rewrites their content in place (a RoPE key shift after `dropBlocks`): a block
   * shared with another sequence is copied (copy-on-write) into a fresh block that takes its
   * place in the table; a block only this sequence holds loses its hash (no prefix lookup finds
   * it any more). The sequence counts as compressed from the first listed index (see
   * `dropBlocks`): tokens computed after a rewrite attend to changed content.
   * @returns the copies to run before the rewrite (src → dst physical ids).
   * @throws {KvAllocatorError} UNKNOWN_SEQUENCE; INVALID_ARGUMENT for an index that is not an
   *   integer in range or a repeat; OUT_OF_BLOCKS when the copies cannot be allocated. Nothing
   *   changes when it throws.
   */
  prepareRewrite(seqId: SeqId, logicalBlocks: readonly number[]): BlockCopy[] {
    const s = this.get(seqId);
    const sorted = this.checkLogicalBlocks(seqId, s, logicalBlocks, s.blocks.length);
    if (sorted.length === 0) return [];
    let shared = 0;
    for (const i of sorted) if (this.pool.refCount(s.blocks[i]!) > 1) shared++;
    const fresh = shared > 0 ? this.pool.allocate(shared) : [];
    if (!fresh) {
      throw new KvAllocatorError(
        'OUT_OF_BLOCKS',
        `rewriting ${sorted.length} blocks of sequence ${String(seqId)} needs ${shared} copies, ${this.pool.numAvailable} blocks are available`,
        { details: { seqId, needed: shared, available: this.pool.numAvailable } },
      );
    }
    const copies: BlockCopy[] = [];
    for (const i of sorted) {
      const src = s.blocks[i]!;
      if (this.pool.refCount(src) > 1) {
        const dst = fresh[copies.length]!;
        this.pool.release(src);
        s.blocks[i] = dst;
        copies.push({ src, dst });
      } else if (this.pool.hashOf(src) !== undefined) {
        this.pool.unpublish(src);
      }
    }
    this.rewriteCopies += copies.length;
    this.markCompressed(s, sorted[0]!);
    return copies;
  }

  /**
   * Physical block ids of a sequence, in logical order.
   * @throws {KvAllocatorError} UNKNOWN_SEQUENCE.
   */
  blockTable(seqId: SeqId): readonly BlockId[] {
    return this.get(seqId).blocks;
  }

  /**
   * Tokens allocated for a sequence.
   * @throws {KvAllocatorError} UNKNOWN_SEQUENCE.
   */
  numTokens(seqId: SeqId): number {
    return this.get(seqId).numTokens;
  }

  has(seqId: SeqId): boolean {
    return this.seqs.has(seqId);
  }

  /** Ids of the live sequences. */
  sequences(): IterableIterator<SeqId> {
    return this.seqs.keys();
  }

  /**
   * Reserves blocks for the KV of `tokens`' full blocks that follow its locally cached prefix
   * and were computed elsewhere (an offload tier, another replica), at most `maxBlocks` of them.
   * The blocks are held (nothing can take them) but not yet findable: write their content,
   * then {@link commitExternal} makes them cached prefix blocks, or {@link abortExternal}
   * frees them. Returns undefined when there is nothing to reserve or no room (nothing
   * changes). The local prefix is never reclaimed to make room.
   * @throws {KvAllocatorError} INVALID_TOKEN for a token id that is not a u32 integer.
   */
  reserveExternal(
    tokens: ArrayLike<number>,
    options: { readonly extraKeys?: ExtraKeys; readonly maxBlocks: number },
  ): ExternalBlocks | undefined {
    if (!this.enablePrefixCaching) return undefined;
    const local = this.findCachedPrefix(tokens, options.extraKeys, { record: false });
    const first = local.blocks.length;
    const hashes: BlockHash[] = [];
    for (const hash of this.blockHashes(tokens, options.extraKeys).slice(first)) {
      // One block per hash: stop before content some block already holds.
      if (hashes.length >= options.maxBlocks || this.pool.lookup(hash) !== undefined) break;
      hashes.push(hash);
    }
    if (hashes.length === 0) return undefined;
    for (const b of local.blocks) this.pool.retain(b);
    const blocks = this.pool.allocate(hashes.length);
    for (const b of local.blocks) this.pool.release(b);
    if (!blocks) return undefined;
    return { firstBlock: first, blocks, hashes };
  }

  /**
   * Publishes reserved blocks whose content has been written: each becomes a cached prefix
   * block under its hash (unless another block took that hash meanwhile; then it is freed).
   */
  commitExternal(reserved: ExternalBlocks): void {
    reserved.blocks.forEach((block, i) => {
      if (this.pool.refCount(block) !== 1 || this.pool.hashOf(block) !== undefined) {
        throw new KvAllocatorError('INVALID_ARGUMENT', `block ${block} is not a reserved block`);
      }
      this.pool.setHash(block, reserved.hashes[i]!);
      this.pool.release(block);
    });
  }

  /** Frees reserved blocks whose content could not be written. */
  abortExternal(reserved: ExternalBlocks): void {
    for (const block of reserved.blocks) this.pool.release(block, false);
  }

  /** Drops every cached (unreferenced) block, e.g. after the weights changed. Returns how many. */
  resetPrefixCache(): number {
    return this.pool.resetCache();
  }

  stats(): KvCacheStats {
    const pool = this.pool;
    const bs = this.blockSize;
    // Tokens held per physical block: count each used block once even when shared.
    const fill = new Int32Array(this.numBlocks);
    let compressed = 0;
    for (const s of this.seqs.values()) {
      if (s.compressedFrom !== Number.POSITIVE_INFINITY) compressed++;
      for (let i = 0; i < s.blocks.length; i++) {
        const inBlock = Math.min(bs, s.numTokens - i * bs);
        const b = s.blocks[i]!;
        if (inBlock > fill[b]!) fill[b] = inBlock;
      }
    }
    let tokens = 0;
    for (let b = 0; b < this.numBlocks; b++) tokens += fill[b]!;
    const used = pool.numUsed;
    return {
      numBlocks: this.numBlocks,
      usedBlocks: used,
      cachedBlocks: pool.numCached,
      freeBlocks: pool.numFree,
      usage: used / this.numBlocks,
      tokenUtilization: used === 0 ? 1 : tokens / (used * bs),
      prefixQueries: this.queries,
      prefixQueryTokens: this.queryTokens,
      prefixHitTokens: this.hitTokens,
      evictions: pool.evictions,
      numSequences: this.seqs.size,
      compressedSequences: compressed,
      droppedBlocks: this.droppedBlocks,
      rewriteCopies: this.rewriteCopies,
    };
  }

  private blocksFor(tokens: number): number {
    return Math.ceil(tokens / this.blockSize);
  }

  private growthOf(seq: Sequence, k: number): number {
    const cow =
      k > 0 &&
      seq.numTokens % this.blockSize !== 0 &&
      this.pool.refCount(seq.blocks[seq.blocks.length - 1]!) > 1
        ? 1
        : 0;
    return cow + this.blocksFor(seq.numTokens + k) - seq.blocks.length;
  }

  /**
   * `logicalBlocks` sorted ascending, after checking each is a distinct integer in [0, limit).
   * @throws {KvAllocatorError} INVALID_ARGUMENT naming the bad entry.
   */
  private checkLogicalBlocks(
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

  private markCompressed(s: Sequence, from: number): void {
    if (from < s.compressedFrom) s.compressedFrom = from;
    // Nothing is hashed any more, so the partial block's tokens need not be kept.
    s.tail.length = 0;
  }

  private checkPrefix(prefix: CachedPrefix): void {
    if (prefix.blocks.length !== prefix.hashes.length) {
      throw new KvAllocatorError(
        'INVALID_ARGUMENT',
        'prefix.blocks and prefix.hashes differ in length',
      );
    }
    if (prefix.numTokens !== prefix.blocks.length * this.blockSize) {
      throw new KvAllocatorError(
        'INVALID_ARGUMENT',
        `prefix.numTokens (${prefix.numTokens}) must be blocks × blockSize (${prefix.blocks.length * this.blockSize})`,
      );
    }
    for (let i = 0; i < prefix.blocks.length; i++) {
      const b = prefix.blocks[i]!;
      if (
        !Number.isInteger(b) ||
        b < 0 ||
        b >= this.numBlocks ||
        this.pool.hashOf(b) !== prefix.hashes[i]
      ) {
        throw new KvAllocatorError(
          'STALE_PREFIX',
          `prefix block ${String(b)} no longer holds the cached content (evicted since findCachedPrefix?)`,
          { details: { index: i, block: b } },
        );
      }
    }
  }

  private get(seqId: SeqId): Sequence {
    const s = this.seqs.get(seqId);
    if (s) return s;
    if (this.recentlyFreed.has(seqId)) {
      throw new KvAllocatorError('DOUBLE_FREE', `sequence ${String(seqId)} was already freed`, {
        details: { seqId },
      });
    }
    throw new KvAllocatorError('UNKNOWN_SEQUENCE', `unknown sequence ${String(seqId)}`, {
      details: { seqId },
    });
  }
}

function validateTokens(tokens: ArrayLike<number>): void {
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
