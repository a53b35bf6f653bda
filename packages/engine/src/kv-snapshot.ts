// A picture of the paged KV cache at one moment: every block's reference count and whether a
// prefix lookup can find it, and each live request's block table. Built only when asked (a
// page polling it between steps), so it costs nothing when nobody looks.
import type { KvCacheManager } from '@kvasir/kv-allocator';
import type { LiveRequestSequences, Scheduler } from '@kvasir/scheduler';

/** A block's state as a picture of the pool draws it (see {@link blockState}). */
export type KvBlockState = 'free' | 'cached' | 'used' | 'shared';

/** One live request's sequences and their block tables (physical block ids, logical order). */
export interface KvSnapshotRequest {
  readonly id: string;
  readonly state: LiveRequestSequences['state'];
  /** Prompt tokens found in the prefix cache when it was admitted. */
  readonly cachedPromptTokens: number;
  readonly seqs: readonly {
    readonly index: number;
    readonly numTokens: number;
    /** Tokens KV compression dropped from its cache. */
    readonly numDropped: number;
    /** Empty while it waits (its blocks are not allocated yet, or were preempted). */
    readonly blocks: readonly number[];
  }[];
}

/**
 * The pool and its owners at one moment, structured-clone data only. `refCounts[b]` is how many
 * block tables hold block `b`; `hashed[b]` says a prefix lookup can find it (full, published).
 * A block is `used` with a reference, `shared` with two or more, `cached` with none but a hash
 * (kept for prefix reuse until evicted), else `free`; the counts agree with the allocator's.
 */
export interface KvSnapshot {
  readonly blockSize: number;
  readonly refCounts: readonly number[];
  readonly hashed: readonly boolean[];
  readonly requests: readonly KvSnapshotRequest[];
  /** Totals since start: prefix lookups and hits (tokens), evictions, blocks compression dropped. */
  readonly counters: {
    readonly prefixQueryTokens: number;
    readonly prefixHitTokens: number;
    readonly evictions: number;
    readonly droppedBlocks: number;
  };
}

/** The state of block `b` in `snapshot`. */
export function blockState(snapshot: KvSnapshot, b: number): KvBlockState {
  const rc = snapshot.refCounts[b] ?? 0;
  if (rc >= 2) return 'shared';
  if (rc === 1) return 'used';
  return snapshot.hashed[b] ? 'cached' : 'free';
}

/** Reads `kvCache` and the scheduler's live requests into a {@link KvSnapshot}. O(blocks). */
export function kvSnapshot(
  kvCache: KvCacheManager,
  scheduler: Pick<Scheduler, 'liveSequences'>,
): KvSnapshot {
  const pool = kvCache.blocks;
  const refCounts: number[] = new Array(kvCache.numBlocks);
  const hashed: boolean[] = new Array(kvCache.numBlocks);
  for (let b = 0; b < kvCache.numBlocks; b++) {
    refCounts[b] = pool.refCount(b);
    hashed[b] = pool.hashOf(b) !== undefined;
  }
  const requests = scheduler.liveSequences().map((r) => ({
    id: r.requestId,
    state: r.state,
    cachedPromptTokens: r.cachedPromptTokens,
    seqs: r.seqs.map((s) => ({
      index: s.index,
      numTokens: s.numTokens,
      numDropped: s.numDropped,
      blocks: kvCache.has(s.seqId) ? [...kvCache.blockTable(s.seqId)] : [],
    })),
  }));
  const stats = kvCache.stats();
  return {
    blockSize: kvCache.blockSize,
    refCounts,
    hashed,
    requests,
    counters: {
      prefixQueryTokens: stats.prefixQueryTokens,
      prefixHitTokens: stats.prefixHitTokens,
      evictions: stats.evictions,
      droppedBlocks: stats.droppedBlocks,
    },
  };
}
