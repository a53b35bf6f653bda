// What an inference engine reports of itself: the statistics `/metrics` shows and the health
// `/health` answers (part of the `InferenceEngine` contract, version `v1`).

/** Counters and gauges for `/metrics`. Counters are monotonic totals since start. */
export interface EngineStats {
  /** Fraction of KV blocks referenced by running sequences, in [0, 1]. */
  readonly kvCacheUsage: number;
  readonly blocks: {
    readonly total: number;
    readonly used: number;
    /** Unreferenced blocks kept for prefix reuse. */
    readonly cached: number;
    readonly free: number;
  };
  /**
   * Tokens per KV block. With `blocks.total` it makes `vllm:cache_config_info{block_size,
   * num_gpu_blocks}`, which an inference gateway's endpoint picker reads; omitted, that series is.
   */
  readonly blockSize?: number;
  /** Prefix-cache lookups and hits, counted in tokens. */
  readonly prefixCache: { readonly queries: number; readonly hits: number };
  readonly requests: {
    readonly running: number;
    readonly waiting: number;
    readonly preempted: number;
  };
  /** Preemptions by mode (`recompute`, `swap`). */
  readonly preemptions: Readonly<Record<string, number>>;
  /** Blocks found in each offload tier (`host`, `disk`, `redis`). */
  readonly offloadHits: Readonly<Record<string, number>>;
  /** Cached prefix blocks the eviction policy reclaimed. */
  readonly evictions?: number;
  /** Steps that failed, and the requests they ended, while the engine went on serving. */
  readonly failures?: { readonly steps: number; readonly requests: number };
  /**
   * Streaming requests the engine ended because their client stopped reading (their unread
   * output passed the engine's bound); their KV blocks came back at once.
   */
  readonly stalledStreams?: number;
  /**
   * KV cache groups (layers whose KV is allocated together), when the cache has several: each
   * group's attention window (null: full attention), the blocks its live tables hold and the
   * tokens in them. A sliding-window group holds only its window.
   */
  readonly kvGroups?: readonly KvGroupStats[];
  /** Each offload tier's health and the entries it had to drop. */
  readonly offloadTiers?: readonly OffloadTierStats[];
  /**
   * Token-level KV compression by policy name: live requests using it, the blocks they hold
   * now, and the tokens it dropped since start.
   */
  readonly kvCompression?: Readonly<
    Record<
      string,
      { readonly requests: number; readonly blocksHeld: number; readonly tokensDropped: number }
    >
  >;
}

/** One KV cache group as `/metrics` shows it. */
export interface KvGroupStats {
  readonly window: number | null;
  readonly blocks: number;
  readonly tokens: number;
}

/** One offload tier as `/metrics` shows it. Counters are totals since start. */
export interface OffloadTierStats {
  /** `host`, `disk` or `redis`. */
  readonly tier: string;
  /** Whether the backend is reachable; undefined for tiers that cannot be disconnected. */
  readonly connected?: boolean;
  readonly misses: number;
  /** Stored entries refused on read (truncated, checksum mismatch) and deleted. */
  readonly corrupt: number;
  /** Entries of another namespace or key, deleted on read. */
  readonly foreign: number;
  /** Backend failures (I/O errors, timeouts), each turned into a miss or a skipped write. */
  readonly errors: number;
  /** Entries reclaimed to stay within the tier's budget. */
  readonly evictions: number;
}

/** Whether the engine can take requests. */
export interface EngineHealth {
  /** `ok`: serving; `loading`: not yet ready; `draining`: finishing work, refusing new. */
  readonly status: 'ok' | 'loading' | 'draining';
  readonly detail?: string;
}
