import type { BlockHash } from '@kvasir/kv-allocator';

/** One block to store: its hash and the exact bytes of the block (all layers, with scales). */
export interface KvBlockEntry {
  readonly key: BlockHash;
  readonly value: Uint8Array;
}

/** Counters every store reports. Monotonic since construction except `entries` and `bytes`. */
export interface OffloadStats {
  /** `host`, `disk`, `redis` or `tiered`. */
  readonly tier: string;
  /** Entries the store knows it holds (undefined where the backend cannot say cheaply: Redis). */
  readonly entries: number | undefined;
  /** Bytes they occupy (payload for host; whole files for disk; undefined for Redis). */
  readonly bytes: number | undefined;
  /** Byte budget (Infinity when the backend manages its own: Redis). */
  readonly capacityBytes: number;
  readonly hits: number;
  readonly misses: number;
  /** Entries written successfully. */
  readonly puts: number;
  readonly deletes: number;
  /** Entries reclaimed to stay within the budget. */
  readonly evictions: number;
  /** Stored values refused on read (truncated, checksum mismatch, unreadable header); each was deleted. */
  readonly corrupt: number;
  /** Well-formed values that belong to another namespace or key; each was deleted. */
  readonly foreign: number;
  /** Backend failures (I/O errors, Redis unreachable or timed out); each became a miss or a skipped write. */
  readonly errors: number;
  readonly bytesRead: number;
  readonly bytesWritten: number;
}

/** Called with a block a store evicts; the value is handed over (the store no longer uses it). */
export type EvictionListener = (key: BlockHash, value: Uint8Array) => void;

/**
 * A store of KV blocks addressed by block hash within one namespace (see `kvNamespace`).
 * All methods are asynchronous and never throw for backend failures: those are misses,
 * counted in `stats()`. They throw `OffloadError` only for misuse, before changing anything.
 */
export interface KvBlockStore {
  /** `host`, `disk`, `redis` or `tiered`. */
  readonly tier: string;
  /** The namespace fingerprint every key of this store lives in. */
  readonly namespace: string;
  /** Largest value `putMany` accepts. */
  readonly maxValueBytes: number;
  /**
   * Stores blocks. A value becomes visible to readers only once completely written.
   * @returns how many entries were stored.
   * @throws {OffloadError} INVALID_KEY, INVALID_VALUE, VALUE_TOO_LARGE, CLOSED.
   */
  putMany(entries: readonly KvBlockEntry[]): Promise<number>;
  /**
   * Reads blocks; `undefined` for each miss. A returned array is the caller's to keep.
   * @throws {OffloadError} INVALID_KEY, CLOSED.
   */
  getMany(keys: readonly BlockHash[]): Promise<(Uint8Array | undefined)[]>;
  /** @throws {OffloadError} INVALID_KEY, CLOSED. */
  has(key: BlockHash): Promise<boolean>;
  /**
   * How many of `keys`, from the first, are present (stops at the first absent one), in one
   * round trip to the backend.
   * @throws {OffloadError} INVALID_KEY, CLOSED.
   */
  countPrefix(keys: readonly BlockHash[]): Promise<number>;
  /**
   * Removes blocks. @returns how many were present.
   * @throws {OffloadError} INVALID_KEY, CLOSED.
   */
  delete(keys: readonly BlockHash[]): Promise<number>;
  stats(): OffloadStats;
  /** Releases resources; later calls throw CLOSED. Idempotent. */
  close(): Promise<void>;
}

/** A store that reports what it evicts, so a `TieredStore` can demote it to the tier below. */
export interface EvictionSource {
  /** Registers `listener`; returns a function that unregisters it. */
  onEvict(listener: EvictionListener): () => void;
}
