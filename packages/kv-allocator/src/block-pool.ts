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
}

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
 */
export class BlockPool {
  readonly numBlocks: number;
  readonly policy: EvictionPolicy<BlockId>;
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
    this.policy = options.evictionPolicy ?? new LruPolicy<BlockId>();
    this.refCounts = new Int32Array(options.numBlocks);
    this.hashes = new Array(options.numBlocks).fill(undefined);
    this.freeStack = new Int32Array(options.numBlocks);
    // Lowest ids on top, so allocation order is predictable in tests and logs.
    for (let i = 0; i < options.numBlocks; i++) this.freeStack[i] = options.numBlocks - 1 - i;
    this.freeTop = options.numBlocks;
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
   * Returns undefined, changing nothing, when fewer than `count` are available.
   * @throws {KvAllocatorError} POLICY_VIOLATION when the eviction policy names a block that is
   *   not reclaimable. Blocks taken before the violation go back to the free stack.
   */
  allocate(count: number): BlockId[] | undefined {
    if (count > this.numAvailable) return undefined;
    const out: BlockId[] = [];
    while (out.length < count) {
      let block: number;
      if (this.freeTop > 0) {
        block = this.freeStack[--this.freeTop]!;
      } else {
        const victim = this.policy.chooseVictim();
        if (
          victim === undefined ||
          !Number.isInteger(victim) ||
          victim < 0 ||
          victim >= this.numBlocks ||
          this.refCounts[victim] !== 0 ||
          this.hashes[victim] === undefined
        ) {
          for (const b of out) this.release(b);
          throw new KvAllocatorError(
            'POLICY_VIOLATION',
            `eviction policy ${this.policy.name ?? '(unnamed)'} chose ${String(victim)}, which is not a cached, unreferenced block`,
            { details: { victim } },
          );
        }
        this.evict(victim);
        block = victim;
      }
      this.refCounts[block] = 1;
      out.push(block);
    }
    return out;
  }

  /** Adds a reference to a block (a cache hit or a fork); a cached block leaves the policy. */
  retain(block: BlockId): void {
    if (this.refCounts[block] === 0) {
      if (this.hashes[block] === undefined) {
        throw new KvAllocatorError('INVALID_ARGUMENT', `block ${block} is free and holds nothing`);
      }
      this.policy.touch(block);
      this.policy.remove(block);
      this.cached--;
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
      this.policy.insert(block);
    } else {
      this.freeStack[this.freeTop++] = block;
    }
  }

  /**
   * Records that `block` (in use) now holds full content `hash`. If another block already holds
   * the same content, `block` stays unhashed (it is freed, not cached, later): one block per hash.
   */
  setHash(block: BlockId, hash: BlockHash): void {
    if (this.hashes[block] !== undefined || this.byHash.has(hash)) return;
    this.hashes[block] = hash;
    this.byHash.set(hash, block);
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
        this.policy.remove(b);
        this.policy.forget?.(b);
        this.dropHash(b);
        this.cached--;
        this.freeStack[this.freeTop++] = b;
        n++;
      }
    }
    return n;
  }

  private evict(block: BlockId): void {
    this.policy.remove(block);
    this.policy.forget?.(block);
    this.dropHash(block);
    this.cached--;
    this.evictionCount++;
  }

  private dropHash(block: BlockId): void {
    const hash = this.hashes[block];
    if (hash !== undefined && this.byHash.get(hash) === block) this.byHash.delete(hash);
    this.hashes[block] = undefined;
  }
}
