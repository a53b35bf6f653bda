import { BlockPool } from './block-pool.js';
import { type BlockPoolView, blockPoolView } from './block-pool-view.js';
import { dropBlocks, prepareRewrite } from './compaction.js';
import { assertInteger, KvAllocatorError } from './errors.js';
import {
  abortExternal,
  commitExternal,
  type ExternalBlocks,
  reserveExternal,
} from './external-blocks.js';
import { checkGroupPrefix, findGroupPrefix, groupPrefixValid } from './group-prefix.js';
import { hashBlock, rootHash } from './hash.js';
import {
  freeableBeforeWindow,
  groupExtraKeys,
  groupWindows,
  HOLE,
  releaseBeforeWindow,
} from './kv-groups.js';
import { appendTokens, growthOf, newSequence, occupancy, type Sequence } from './sequence.js';
import { SequenceTable } from './sequence-table.js';
import type {
  AllocateOptions,
  AllocateResult,
  BlockCopy,
  BlockHash,
  BlockId,
  CachedPrefix,
  ExtraKeys,
  FreeOptions,
  KvCacheManagerOptions,
  KvCacheStats,
  KvGroupStats,
  SeqId,
} from './types.js';
import { checkPrefix, holdsPrefixBlock, validateTokens } from './validate.js';

const EMPTY_PREFIX: CachedPrefix = Object.freeze({ numTokens: 0, blocks: [], hashes: [] });

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
  /** Each KV cache group's window (null: full attention), group 0 first. */
  readonly windows: readonly (number | null)[];
  /** One `Sequence` (block table) per group, for each live sequence. */
  private readonly seqs = new SequenceTable<Sequence[]>();
  private readonly releasedBlocks: number[];
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
    const { evictionPolicy, onEvictionPolicyFailure: onPolicyFailure } = options;
    this.pool = new BlockPool({
      numBlocks: options.numBlocks,
      ...(evictionPolicy ? { evictionPolicy } : {}),
      ...(onPolicyFailure ? { onPolicyFailure } : {}),
      ...(options.onBlockEvent ? { onBlockEvent: options.onBlockEvent } : {}),
    });
    this.numBlocks = this.pool.numBlocks;
    this.blocks = blockPoolView(this.pool);
    this.enablePrefixCaching = options.enablePrefixCaching ?? true;
    this.seed = options.hashSeed ?? 'kvasir';
    this.windows = Object.freeze(groupWindows(options.groups));
    this.releasedBlocks = this.windows.map(() => 0);
  }

  /** KV cache groups (1 without `options.groups`). */
  get numGroups(): number {
    return this.windows.length;
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
    options: { readonly record?: boolean; readonly maxBlocks?: number } = {},
  ): CachedPrefix {
    const record = options.record ?? true;
    if (record) {
      this.queries++;
      this.queryTokens += tokens.length;
    }
    if (!this.enablePrefixCaching) return EMPTY_PREFIX;
    const maxBlocks = options.maxBlocks ?? Number.POSITIVE_INFINITY;
    if (this.windows.length > 1) {
      validateTokens(tokens);
      const lookup = {
        pool: this.pool,
        seed: this.seed,
        blockSize: this.blockSize,
        windows: this.windows,
      };
      const p = findGroupPrefix(lookup, tokens, extraKeys, maxBlocks);
      if (record) this.hitTokens += p.numTokens;
      return p;
    }
    const blocks: BlockId[] = [];
    const hashes: BlockHash[] = [];
    let parent = rootHash(this.seed, extraKeys);
    const full = Math.min(Math.floor(tokens.length / this.blockSize), maxBlocks);
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
    if (prefix.groups !== undefined) return groupPrefixValid(this.pool, prefix);
    return (
      prefix.blocks.length === prefix.hashes.length &&
      prefix.blocks.every((_, i) => holdsPrefixBlock(this.pool, prefix, i))
    );
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
    const seqs = this.seqs.find(seqId);
    if (!seqs) {
      const p = prefix ?? EMPTY_PREFIX;
      const parts = p.groups ?? this.windows.map(() => p);
      let n = 0;
      for (const part of parts) {
        for (const b of part.blocks) if (b !== HOLE && this.pool.refCount(b) === 0) n++;
        n += Math.ceil((p.numTokens + numNewTokens) / this.blockSize) - part.blocks.length;
      }
      return n;
    }
    return Math.max(0, this.#netGrowth(seqs, numNewTokens));
  }

  /** Blocks appending `k` tokens takes in every group, less those out of a window it releases. */
  #netGrowth(seqs: readonly Sequence[], k: number): number {
    let n = 0;
    for (const [g, s] of seqs.entries()) {
      n += growthOf(this.pool, s, k, this.blockSize);
      if (k > 0) n -= freeableBeforeWindow(this.pool, s, this.windows[g]!, this.blockSize);
    }
    return n;
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
    let seqs = this.seqs.find(seqId);
    const isNew = seqs === undefined;
    const prefix = options.prefix ?? EMPTY_PREFIX;
    if (!isNew && options.prefix && options.prefix.blocks.length > 0) {
      throw new KvAllocatorError(
        'INVALID_ARGUMENT',
        `sequence ${String(seqId)} already exists; a prefix can only be adopted on its first allocation`,
        { details: { seqId } },
      );
    }
    if (isNew && this.windows.length > 1) {
      checkGroupPrefix(this.pool, this.blockSize, this.windows.length, prefix);
    } else if (isNew) {
      checkPrefix(this.pool, this.blockSize, prefix);
    }

    const needed = isNew
      ? this.numBlocksToAllocate(seqId, newTokenIds.length, prefix)
      : this.#netGrowth(seqs!, newTokenIds.length);
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
      seqs = this.windows.map((_, g) => {
        const part = prefix.groups?.[g] ?? prefix;
        let released = 0;
        for (const b of part.blocks) {
          if (b === HOLE) released++;
          else this.pool.retain(b);
        }
        const root = () => rootHash(this.seed, groupExtraKeys(options.extraKeys, g));
        const lastHash = part.hashes.at(-1) ?? root();
        return newSequence([...part.blocks], prefix.numTokens, lastHash, released);
      });
      this.seqs.add(seqId, seqs);
    }
    const slotMappings: Int32Array[] = [];
    const copies: BlockCopy[] = [];
    // Every group releases first: the admission check counted those blocks as available.
    for (const [g, s] of seqs!.entries()) {
      if (newTokenIds.length === 0) break;
      this.releasedBlocks[g]! += releaseBeforeWindow(
        this.pool,
        s,
        this.windows[g]!,
        this.blockSize,
      );
    }
    for (const s of seqs!) {
      const r = appendTokens(this.pool, s, newTokenIds, this.blockSize, this.enablePrefixCaching);
      slotMappings.push(r.slotMapping);
      copies.push(...r.copies);
    }
    return { ok: true, slotMapping: slotMappings[0]!, copies, slotMappings };
  }

  /**
   * Makes `child` share every block of `parent` by reference (parallel sampling, beam search).
   * The first write into a shared, partially filled last block copies it.
   * @throws {KvAllocatorError} UNKNOWN_SEQUENCE for an unknown parent; SEQUENCE_EXISTS when the
   *   child id is taken.
   */
  fork(parent: SeqId, child: SeqId): void {
    const ps = this.seqs.get(parent);
    if (this.seqs.has(child)) {
      throw new KvAllocatorError('SEQUENCE_EXISTS', `sequence ${String(child)} already exists`, {
        details: { seqId: child },
      });
    }
    const copy = (p: Sequence): Sequence => {
      for (const b of p.blocks) if (b !== HOLE) this.pool.retain(b);
      return { ...p, blocks: [...p.blocks], tail: [...p.tail] };
    };
    this.seqs.add(child, ps.map(copy));
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
    const keep = options.keepCached ?? true;
    for (const s of this.seqs.get(seqId)) {
      for (let i = s.blocks.length - 1; i >= s.released; i--) {
        this.pool.release(s.blocks[i]!, keep && i < s.compressedFrom);
      }
    }
    this.seqs.remove(seqId);
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
    this.droppedBlocks += dropBlocks(
      this.pool,
      this.blockSize,
      seqId,
      this.#single(seqId, 'dropBlocks'),
      logicalBlocks,
    );
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
    const copies = prepareRewrite(
      this.pool,
      seqId,
      this.#single(seqId, 'prepareRewrite'),
      logicalBlocks,
    );
    this.rewriteCopies += copies.length;
    return copies;
  }

  /**
   * The sequence's only block table; token-level compression rewrites one table, so a manager
   * with several groups refuses it.
   * @throws {KvAllocatorError} UNKNOWN_SEQUENCE; INVALID_ARGUMENT with several groups.
   */
  #single(seqId: SeqId, what: string): Sequence {
    const seqs = this.seqs.get(seqId);
    if (seqs.length > 1) {
      throw new KvAllocatorError(
        'INVALID_ARGUMENT',
        `${what} needs a manager with one KV group (this one has ${seqs.length}: sliding-window groups hold holes, not a compressible table)`,
        { details: { seqId, groups: seqs.length } },
      );
    }
    return seqs[0]!;
  }

  /**
   * Physical block ids of a sequence, in logical order: group 0's table.
   * @throws {KvAllocatorError} UNKNOWN_SEQUENCE.
   */
  blockTable(seqId: SeqId): readonly BlockId[] {
    return this.seqs.get(seqId)[0]!.blocks;
  }

  /**
   * The sequence's block table in each KV cache group, group 0 first. A sliding group's table
   * holds `-1` where a block before the window was released.
   * @throws {KvAllocatorError} UNKNOWN_SEQUENCE.
   */
  blockTables(seqId: SeqId): readonly (readonly BlockId[])[] {
    return this.seqs.get(seqId).map((s) => s.blocks);
  }

  /**
   * Tokens allocated for a sequence.
   * @throws {KvAllocatorError} UNKNOWN_SEQUENCE.
   */
  numTokens(seqId: SeqId): number {
    return this.seqs.get(seqId)[0]!.numTokens;
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
    // Offload tiers keep one chain of whole blocks; grouped tables are not offloaded.
    if (!this.enablePrefixCaching || this.windows.length > 1) return undefined;
    const local = this.findCachedPrefix(tokens, options.extraKeys, { record: false });
    const chain = this.blockHashes(tokens, options.extraKeys);
    return reserveExternal(this.pool, local, chain, options.maxBlocks, tokens, this.blockSize);
  }

  /**
   * Publishes reserved blocks whose content has been written: each becomes a cached prefix
   * block under its hash.
   * @throws {KvAllocatorError} INVALID_ARGUMENT for a block that is not reserved.
   */
  commitExternal(reserved: ExternalBlocks): void {
    commitExternal(this.pool, reserved);
  }

  /** Frees reserved blocks whose content could not be written. */
  abortExternal(reserved: ExternalBlocks): void {
    abortExternal(this.pool, reserved);
  }

  /** Every block a prefix lookup can hit now, with its hash (what KV event snapshots list). */
  publishedBlocks(): [BlockId, BlockHash][] {
    return [...this.pool.hashedBlocks()];
  }

  /** Drops every cached (unreferenced) block, e.g. after the weights changed. Returns how many. */
  resetPrefixCache(): number {
    return this.pool.resetCache();
  }

  stats(): KvCacheStats {
    const pool = this.pool;
    const groups: KvGroupStats[] = [];
    let tokens = 0;
    let compressed = 0;
    for (const [g, window] of this.windows.entries()) {
      const seqs = [...this.seqs.values()].map((s) => s[g]!);
      const o = occupancy(seqs, this.numBlocks, this.blockSize);
      tokens += o.tokens;
      if (g === 0) compressed = o.compressed;
      const held = new Set<BlockId>();
      for (const s of seqs)
        for (let i = s.released; i < s.blocks.length; i++) held.add(s.blocks[i]!);
      groups.push({
        window,
        blocks: held.size,
        tokens: o.tokens,
        releasedBlocks: this.releasedBlocks[g]!,
      });
    }
    const used = pool.numUsed;
    return {
      numBlocks: this.numBlocks,
      usedBlocks: used,
      cachedBlocks: pool.numCached,
      freeBlocks: pool.numFree,
      usage: used / this.numBlocks,
      tokenUtilization: used === 0 ? 1 : tokens / (used * this.blockSize),
      prefixQueries: this.queries,
      prefixQueryTokens: this.queryTokens,
      prefixHitTokens: this.hitTokens,
      evictions: pool.evictions,
      numSequences: this.seqs.size,
      compressedSequences: compressed,
      droppedBlocks: this.droppedBlocks,
      rewriteCopies: this.rewriteCopies,
      groups,
    };
  }
}
