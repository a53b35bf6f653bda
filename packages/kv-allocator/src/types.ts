// The public contract of @kvasir/kv-allocator. @kvasir/scheduler, @kvasir/offload and the app
// code against these types; change them only together with their users.

import type { BlockPoolEvent } from './block-pool.js';
import type { KvAllocatorError } from './errors.js';
import type { EvictionPolicy } from './policies/eviction-policy.js';

/** Index of a physical KV block in the pool, 0 ≤ id < numBlocks. */
export type BlockId = number;

/**
 * Content hash of a full block: 128 bits as 32 lowercase hex characters. Chains the parent
 * block's hash, the block's token ids and the extra keys, so equal hashes mean equal KV content.
 */
export type BlockHash = string;

/** Identifier of a sequence (one request, or one child of a parallel-sampling / beam group). */
export type SeqId = string | number;

/**
 * What, besides token ids, changes a block's KV content: model, LoRA adapter, cache salt
 * (isolates tenants), multimodal inputs. Mixed into every block hash.
 */
export interface ExtraKeys {
  readonly modelId?: string;
  readonly adapterId?: string;
  readonly cacheSalt?: string;
  readonly [key: string]: string | number | undefined;
}

/** Shape of the KV cache, for memory arithmetic (`kvBytesPerToken`, `kvBytesPerBlock`). */
export interface KvLayout {
  readonly numLayers: number;
  readonly numKvHeads: number;
  readonly headDim: number;
  /** Tokens per block (vLLM's default 16). */
  readonly blockSize: number;
  /** Bytes per stored element: 4 f32, 2 f16/bf16, 1 int8/fp8, 0.5 int4. */
  readonly bytesPerElement: number;
  /**
   * Bytes of quantization metadata (scales, zero points) per token, per KV head, for K or V
   * alone. 0 (the default) for formats without scales.
   */
  readonly scaleBytesPerTokenHead?: number;
}

/** A longest cached prefix, as found by `KvCacheManager.findCachedPrefix`. */
export interface CachedPrefix {
  /** Number of prompt tokens covered by the cached blocks (a multiple of the block size). */
  readonly numTokens: number;
  /** The cached physical blocks, in logical order. */
  readonly blocks: readonly BlockId[];
  /** Their hashes, in the same order. */
  readonly hashes: readonly BlockHash[];
  /**
   * With KV cache groups (`KvCacheManagerOptions.groups`): each group's part of the hit, group
   * 0 first (whose blocks and hashes are the fields above). A sliding group's `blocks` hold
   * `-1` (a hole) before its window; `hashes` cover every block of the hit.
   */
  readonly groups?: readonly CachedPrefixGroup[];
}

/** One KV cache group's blocks of a {@link CachedPrefix}. */
export interface CachedPrefixGroup {
  readonly blocks: readonly BlockId[];
  readonly hashes: readonly BlockHash[];
}

/**
 * A KV cache group: layers whose KV is allocated together, with one block table per sequence.
 * `window` (a sliding-window group): a query at position p reads keys p − window + 1 .. p, so
 * the blocks wholly before the next query's window are released. null/absent: full attention.
 */
export interface KvGroupSpec {
  readonly window?: number | null;
}

/** What one KV cache group holds now (`KvCacheStats.groups`). */
export interface KvGroupStats {
  readonly window: number | null;
  /** Distinct blocks the group's live block tables reference. */
  readonly blocks: number;
  /** Tokens those blocks hold (a shared block counted once, at its fullest). */
  readonly tokens: number;
  /** Blocks released from live sequences because they fell out of the window, so far. */
  readonly releasedBlocks: number;
}

/** A whole-block copy the executor must run before the step (copy-on-write). */
export interface BlockCopy {
  readonly src: BlockId;
  readonly dst: BlockId;
}

/** Result of `KvCacheManager.allocateSlots`. */
export type AllocateResult =
  | {
      readonly ok: true;
      /** Slot (block × blockSize + offset) of each new token, in order. */
      readonly slotMapping: Int32Array;
      /** Copy-on-write copies to run before the model writes into the slots. */
      readonly copies: readonly BlockCopy[];
      /** The slots in each KV cache group, group 0 first (`slotMappings[0] === slotMapping`). */
      readonly slotMappings: readonly Int32Array[];
    }
  | {
      readonly ok: false;
      readonly reason: 'NO_FREE_BLOCKS';
      /** Blocks the request needed. */
      readonly blocksNeeded: number;
      /** Blocks that were free or reclaimable. */
      readonly blocksAvailable: number;
    };

/** Usage statistics of a `KvCacheManager`. */
export interface KvCacheStats {
  readonly numBlocks: number;
  /** Blocks referenced by at least one sequence. */
  readonly usedBlocks: number;
  /** Blocks holding cached content that no sequence references (reclaimable). */
  readonly cachedBlocks: number;
  /** Blocks holding nothing. */
  readonly freeBlocks: number;
  /** usedBlocks / numBlocks. */
  readonly usage: number;
  /** Tokens stored ÷ token capacity of the used blocks (1 − internal fragmentation). */
  readonly tokenUtilization: number;
  /** `findCachedPrefix` calls, and prompt tokens looked up / found in cache. */
  readonly prefixQueries: number;
  readonly prefixQueryTokens: number;
  readonly prefixHitTokens: number;
  /** Cached blocks reclaimed by the eviction policy so far. */
  readonly evictions: number;
  readonly numSequences: number;
  /** Live sequences that dropped or rewrote blocks (token-level compression). */
  readonly compressedSequences: number;
  /** Blocks released by `dropBlocks` so far. */
  readonly droppedBlocks: number;
  /** Copy-on-write copies made by `prepareRewrite` so far. */
  readonly rewriteCopies: number;
  /** Per KV cache group, group 0 first (one entry without groups). */
  readonly groups: readonly KvGroupStats[];
}

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
   * Told once when the eviction policy fails (throws, or names a block it may not reclaim); the
   * pool goes on with the built-in LRU policy (see `BlockPool`).
   */
  readonly onEvictionPolicyFailure?: (error: KvAllocatorError) => void;
  /**
   * Told each time a block's hash enters or leaves the prefix-cache index (see
   * `BlockPoolOptions.onBlockEvent`): the source of KV event streams. Unset costs nothing.
   */
  readonly onBlockEvent?: (event: BlockPoolEvent) => void;
  /**
   * Seed of every hash chain. Engines sharing blocks (through a shared offload tier) must use
   * the same seed; anything else may use the default.
   */
  readonly hashSeed?: string;
  /**
   * KV cache groups, all drawing pages from the one pool (a physical block is one page of one
   * group). Default: one full-attention group. Each sequence gets one block table per group;
   * sliding-window groups release the blocks before their window.
   */
  readonly groups?: readonly KvGroupSpec[];
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
