import { assertInteger, KvAllocatorError } from './errors.js';
import type { EvictionPolicy } from './policies/eviction-policy.js';
import { LruPolicy } from './policies/lru-policy.js';
import type { BlockHash, BlockId } from './types.js';

/** Options of `BlockPool`. */
export interface BlockPoolOptions {
  /** Number of physical blocks. */
  readonly numBlocks: number;
  /** Decides which cached, unreferenced block is reclaimed first. Default `LruPolicy`. */
  readonly evictionPolicy?: EvictionPolicy<BlockId>;
  /**
   * Called once, when the eviction policy fails: a hook throws, or `chooseVictim` names a block
   * that is not cached and unreferenced. The pool has already switched to a built-in LRU policy
   * by then (see {@link BlockPool.policyFailure}).
   */
  readonly onPolicyFailure?: (error: KvAllocatorError) => void;
  /**
   * Told, synchronously, each time a block's content hash enters or leaves the hash index (the
   * set a prefix lookup can hit): for KV event streams. Unset, the pool does no work for it.
   * It must not throw nor call back into the pool; buffer the event and act on it later.
   */
  readonly onBlockEvent?: (event: BlockPoolEvent) => void;
}

/**
 * A change to the pool's hash index. `stored`: `block` now holds full content `hash`, chained
 * on `parent` (undefined for a sequence's first block), of `tokens` when the caller knew them.
 * `removed`: no block holds `hash` any more (evicted, reset, unpublished, or a failed write).
 */
export type BlockPoolEvent =
  | {
      readonly type: 'stored';
      readonly block: BlockId;
      readonly hash: BlockHash;
      readonly parent: BlockHash | undefined;
      readonly tokens: readonly number[] | undefined;
    }
  | { readonly type: 'removed'; readonly block: BlockId; readonly hash: BlockHash };

/**
 * A fixed set of physical KV blocks with reference counts and a content-hash index.
 *
 * Every block is in exactly one state:
 * - free: holds nothing, on the free stack;
 * - cached: holds hashed content, no reference, tracked by the eviction policy (reclaimable);
 * - used: referenced by at least one block table (`refCount > 0`), hashed or not.
 *
 * New blocks come from the free stack first, and only then by reclaiming the policy's victim,
 * so cached prefixes survive as long as there is room.
 *
 * The pool changes its own state before it tells the policy, so a policy that throws, or names
 * a block it may not reclaim, can never leave a block half freed: the pool reports it once
 * (`onPolicyFailure`), goes on with a built-in LRU policy over the blocks cached at that moment,
 * and the operation completes as if the policy had been LRU all along.
 */
export class BlockPool {
  readonly numBlocks: number;
  #policy: EvictionPolicy<BlockId>;
  #policyFailure: KvAllocatorError | undefined;
  readonly #onPolicyFailure: ((error: KvAllocatorError) => void) | undefined;
  readonly #onBlockEvent: ((event: BlockPoolEvent) => void) | undefined;
  private readonly refCounts: Int32Array;
  private readonly hashes: (BlockHash | undefined)[];
  private readonly byHash = new Map<BlockHash, BlockId>();
  private readonly freeStack: Int32Array;
  private freeTop: number;
  private cached = 0;
  private evictionCount = 0;

  /** @throws {KvAllocatorError} INVALID_ARGUMENT for a non-positive block count. */
  constructor(options: BlockPoolOptions) {
    assertInteger('numBlocks', options.numBlocks, 1);
    this.numBlocks = options.numBlocks;
    this.#policy = options.evictionPolicy ?? new LruPolicy<BlockId>();
    this.#onPolicyFailure = options.onPolicyFailure;
    this.#onBlockEvent = options.onBlockEvent;
    this.refCounts = new Int32Array(options.numBlocks);
    this.hashes = new Array(options.numBlocks).fill(undefined);
    this.freeStack = new Int32Array(options.numBlocks);
    // Lowest ids on top, so allocation order is predictable in tests and logs.
    for (let i = 0; i < options.numBlocks; i++) this.freeStack[i] = options.numBlocks - 1 - i;
    this.freeTop = options.numBlocks;
  }

  /** The eviction policy in use: the configured one, or the built-in LRU after it failed. */
  get policy(): EvictionPolicy<BlockId> {
    return this.#policy;
  }

  /** Why the configured eviction policy was replaced by the built-in LRU; undefined while it works. */
  get policyFailure(): KvAllocatorError | undefined {
    return this.#policyFailure;
  }

  /** Blocks holding nothing. */
  get numFree(): number {
    return this.freeTop;
  }

  /** Blocks holding cached content that nothing references. */
  get numCached(): number {
    return this.cached;
  }

  /** Blocks a caller can get now: free plus reclaimable. */
  get numAvailable(): number {
    return this.freeTop + this.cached;
  }

  /** Blocks referenced by at least one sequence. */
  get numUsed(): number {
    return this.numBlocks - this.freeTop - this.cached;
  }

  /** Cached blocks reclaimed so far. */
  get evictions(): number {
    return this.evictionCount;
  }

  refCount(block: BlockId): number {
    return this.refCounts[block] ?? 0;
  }

  hashOf(block: BlockId): BlockHash | undefined {
    return this.hashes[block];
  }

  /** The block holding content `hash`, if cached or in use. */
  lookup(hash: BlockHash): BlockId | undefined {
    return this.byHash.get(hash);
  }

  /**
   * Takes `count` blocks (reference count 1 each), free ones first, then by eviction.
   * Returns undefined, changing nothing, when fewer than `count` are available. A policy that
   * throws from `chooseVictim`, or names a block that is not reclaimable, is replaced by the
   * built-in LRU (see the class comment) and the allocation goes on.
   */
  allocate(count: number): BlockId[] | undefined {
    if (count > this.numAvailable) return undefined;
    const out: BlockId[] = [];
    while (out.length < count) {
      let block: number;
      if (this.freeTop > 0) {
        block = this.freeStack[--this.freeTop]!;
      } else {
        block = this.#chooseVictim();
        this.evict(block);
      }
      this.refCounts[block] = 1;
      out.push(block);
    }
    return out;
  }

  /** The policy's victim; the fallback's when the policy throws or names a wrong block. */
  #chooseVictim(): BlockId {
    let victim: BlockId | undefined;
    try {
      victim = this.#policy.chooseVictim();
    } catch (error) {
      this.#policyFailed('chooseVictim', error);
      return this.#policy.chooseVictim()!;
    }
    if (this.#isCached(victim)) return victim!;
    if (this.#policyFailure !== undefined) {
      // Only the built-in fallback runs now: a wrong victim is a bug of this pool.
      throw new KvAllocatorError('INVALID_ARGUMENT', `no cached block to reclaim (${victim})`);
    }
    this.#policyFailed(
      'chooseVictim',
      undefined,
      `chose ${String(victim)}, which is not a cached, unreferenced block`,
      { victim },
    );
    return this.#policy.chooseVictim()!;
  }

  #isCached(block: unknown): boolean {
    return (
      typeof block === 'number' &&
      Number.isInteger(block) &&
      block >= 0 &&
      block < this.numBlocks &&
      this.refCounts[block] === 0 &&
      this.hashes[block] !== undefined
    );
  }

  /** Calls a policy hook after the pool's own state changed; a throw switches to the fallback. */
  #tell(hook: 'insert' | 'touch' | 'remove' | 'forget', block: BlockId): void {
    try {
      this.#policy[hook]?.(block);
    } catch (error) {
      this.#policyFailed(hook, error);
    }
  }

  /**
   * Replaces a failed policy by a built-in LRU holding every block cached now (in id order:
   * the failed policy's order is unknown), and reports the failure once.
   */
  #policyFailed(
    hook: string,
    cause: unknown,
    why = `threw from ${hook}: ${cause instanceof Error ? cause.message : String(cause)}`,
    details: Record<string, unknown> = {},
  ): void {
    if (this.#policyFailure !== undefined) throw cause; // the built-in fallback itself threw
    const error = new KvAllocatorError(
      'POLICY_VIOLATION',
      `eviction policy ${this.#policy.name ?? '(unnamed)'} ${why}; using the built-in lru policy from now on`,
      { cause, details: { policy: this.#policy.name, hook, ...details } },
    );
    this.#policyFailure = error;
    const fallback = new LruPolicy<BlockId>();
    for (let b = 0; b < this.numBlocks; b++) {
      if (this.refCounts[b] === 0 && this.hashes[b] !== undefined) fallback.insert(b);
    }
    this.#policy = fallback;
    this.#onPolicyFailure?.(error);
  }

  /** Adds a reference to a block (a cache hit or a fork); a cached block leaves the policy. */
  retain(block: BlockId): void {
    if (this.refCounts[block] === 0) {
      if (this.hashes[block] === undefined) {
        throw new KvAllocatorError('INVALID_ARGUMENT', `block ${block} is free and holds nothing`);
      }
      this.refCounts[block] = 1;
      this.cached--;
      this.#tell('touch', block);
      this.#tell('remove', block);
      return;
    }
    this.refCounts[block]!++;
  }

  /**
   * Drops a reference; at zero a hashed block becomes cached, an unhashed one free. With
   * `keepCached: false` a block whose last reference this was is freed and forgets its hash:
   * for content that was never written (a failed step), which no prefix lookup may ever hit.
   */
  release(block: BlockId, keepCached = true): void {
    const rc = --this.refCounts[block]!;
    if (rc > 0) return;
    if (rc < 0) {
      this.refCounts[block] = 0;
      throw new KvAllocatorError('DOUBLE_FREE', `block ${block} released more often than retained`);
    }
    if (!keepCached) this.dropHash(block);
    if (this.hashes[block] !== undefined) {
      this.cached++;
      this.#tell('insert', block);
    } else {
      this.freeStack[this.freeTop++] = block;
    }
  }

  /**
   * Records that `block` (in use) now holds full content `hash`. If another block already holds
   * the same content, `block` stays unhashed (it is freed, not cached, later): one block per hash.
   */
  setHash(block: BlockId, hash: BlockHash, parent?: BlockHash, tokens?: readonly number[]): void {
    if (this.hashes[block] !== undefined || this.byHash.has(hash)) return;
    this.hashes[block] = hash;
    this.byHash.set(hash, block);
    if (this.#onBlockEvent !== undefined) {
      this.#onBlockEvent({
        type: 'stored',
        block,
        hash,
        parent,
        tokens: tokens === undefined ? undefined : [...tokens],
      });
    }
  }

  /** Every block in the hash index with its hash (used or cached): what a prefix lookup can hit. */
  *hashedBlocks(): IterableIterator<[BlockId, BlockHash]> {
    for (const [hash, block] of this.byHash) yield [block, hash];
  }

  /**
   * Takes a used block out of the hash index: its content is about to change in place, so no
   * prefix lookup may find it any more. It is freed, not cached, when its last reference goes.
   * @throws {KvAllocatorError} INVALID_ARGUMENT for a block nothing references.
   */
  unpublish(block: BlockId): void {
    if (!(this.refCounts[block]! > 0)) {
      throw new KvAllocatorError('INVALID_ARGUMENT', `block ${block} is not in use`, {
        details: { block },
      });
    }
    this.dropHash(block);
  }

  /** Empties every cached block (e.g. after weights change). Used blocks keep their hashes. */
  resetCache(): number {
    let n = 0;
    for (let b = 0; b < this.numBlocks; b++) {
      if (this.refCounts[b] === 0 && this.hashes[b] !== undefined) {
        this.dropHash(b);
        this.cached--;
        this.freeStack[this.freeTop++] = b;
        this.#tell('remove', b);
        this.#tell('forget', b);
        n++;
      }
    }
    return n;
  }

  private evict(block: BlockId): void {
    this.dropHash(block);
    this.cached--;
    this.evictionCount++;
    this.#tell('remove', block);
    this.#tell('forget', block);
  }

  private dropHash(block: BlockId): void {
    const hash = this.hashes[block];
    if (hash !== undefined && this.byHash.get(hash) === block) {
      this.byHash.delete(hash);
      this.#onBlockEvent?.({ type: 'removed', block, hash });
    }
    this.hashes[block] = undefined;
  }
}
