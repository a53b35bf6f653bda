import { type BlockHash, type EvictionPolicy, LruPolicy } from '@kvasir/kv-allocator';
import { BudgetedIndex } from './budgeted-index.js';
import { checkNamespace } from './keys.js';
import { Counters } from './stats.js';
import type {
  EvictionListener,
  EvictionSource,
  KvBlockEntry,
  KvBlockStore,
  OffloadStats,
} from './types.js';
import { checkBudget, checkEntries, checkKeys, checkOpen, checkPolicy } from './validate.js';

/**
 * A copy in its own, uninitialized allocation: `slice()` would zero-fill the new memory first,
 * a wasted pass over every byte (no pooled allocation either: a stored block must not pin a
 * pool shared with other buffers).
 */
function copyOf(v: Uint8Array): Uint8Array {
  const out = Buffer.allocUnsafeSlow(v.byteLength);
  out.set(v);
  return out;
}

/** Options of {@link HostMemoryStore}. */
export interface HostMemoryStoreOptions {
  /** Namespace fingerprint from `kvNamespace()`. */
  readonly namespace: string;
  /** Byte budget for stored payloads; never exceeded. */
  readonly maxBytes: number;
  /** Which block goes first when the budget is full; `LruPolicy` by default. */
  readonly policy?: EvictionPolicy<BlockHash>;
  /**
   * Return a copy from `getMany` (default true). With false, callers get views of the stored
   * bytes and must not modify them: one copy fewer per hit.
   */
  readonly copyOnGet?: boolean;
}

/**
 * KV blocks in this process's memory within a byte budget, evicted through the same
 * `EvictionPolicy` contract as the GPU block pool. Values are copied in (the caller may reuse
 * its buffer) and, by default, copied out. No framing or checksums: the bytes never leave the
 * process, so there is nothing to verify.
 */
export class HostMemoryStore implements KvBlockStore, EvictionSource {
  readonly tier = 'host';
  readonly namespace: string;
  readonly maxBytes: number;
  /** Equal to `maxBytes`: one block may take the whole budget. */
  readonly maxValueBytes: number;
  private readonly copyOnGet: boolean;
  private readonly entries = new Map<BlockHash, Uint8Array>();
  private readonly index: BudgetedIndex;
  private readonly listeners = new Set<EvictionListener>();
  private readonly counters = new Counters();
  private closed = false;

  /** @throws {OffloadError} INVALID_KEY for a malformed namespace, INVALID_OPTIONS for a bad budget or policy. */
  constructor(options: HostMemoryStoreOptions) {
    checkNamespace(options.namespace);
    this.namespace = options.namespace;
    this.maxBytes = checkBudget('maxBytes', options.maxBytes);
    this.maxValueBytes = this.maxBytes;
    this.index = new BudgetedIndex(
      this.maxBytes,
      checkPolicy(options.policy ?? new LruPolicy<BlockHash>()),
    );
    this.copyOnGet = options.copyOnGet ?? true;
  }

  /** {@inheritDoc EvictionSource.onEvict} */
  onEvict(listener: EvictionListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * Stores copies of the values, evicting as the policy says to stay within `maxBytes`.
   * @throws {OffloadError} INVALID_KEY, INVALID_VALUE, VALUE_TOO_LARGE (larger than the whole budget), CLOSED.
   */
  async putMany(entries: readonly KvBlockEntry[]): Promise<number> {
    return this.putManySync(entries);
  }

  /** Synchronous {@link putMany}, for callers already on a hot path. */
  putManySync(entries: readonly KvBlockEntry[]): number {
    checkOpen(this.closed, this.tier);
    checkEntries(entries, this.maxValueBytes);
    for (const { key, value } of entries) {
      if (this.index.remove(key) !== undefined) this.entries.delete(key);
      // Room for one value is always there: none is larger than the whole budget.
      const victims = this.index.reserve(value.byteLength) ?? [];
      this.index.release(value.byteLength);
      for (const victim of victims) this.evicted(victim);
      this.entries.set(key, copyOf(value));
      this.index.insert(key, value.byteLength);
      this.counters.puts++;
      this.counters.bytesWritten += value.byteLength;
    }
    return entries.length;
  }

  /** Hands a victim the index dropped to the eviction listeners. */
  private evicted(key: BlockHash): void {
    const value = this.entries.get(key);
    if (value === undefined) return;
    this.entries.delete(key);
    this.counters.evictions++;
    for (const l of this.listeners) {
      try {
        l(key, value);
      } catch {
        // A listener's failure must not leave a put half done.
      }
    }
  }

  /** @throws {OffloadError} INVALID_KEY, CLOSED. */
  async getMany(keys: readonly BlockHash[]): Promise<(Uint8Array | undefined)[]> {
    return this.getManySync(keys);
  }

  /** Synchronous {@link getMany}. */
  getManySync(keys: readonly BlockHash[]): (Uint8Array | undefined)[] {
    checkOpen(this.closed, this.tier);
    checkKeys(keys);
    const out: (Uint8Array | undefined)[] = new Array(keys.length);
    for (let i = 0; i < keys.length; i++) {
      const key = keys[i] as BlockHash;
      const value = this.entries.get(key);
      if (value === undefined) {
        this.counters.misses++;
        out[i] = undefined;
        continue;
      }
      this.index.touch(key);
      this.counters.hits++;
      this.counters.bytesRead += value.byteLength;
      out[i] = this.copyOnGet ? copyOf(value) : value;
    }
    return out;
  }

  /** @throws {OffloadError} INVALID_KEY, CLOSED. */
  async has(key: BlockHash): Promise<boolean> {
    checkOpen(this.closed, this.tier);
    checkKeys([key]);
    return this.entries.has(key);
  }

  /** @throws {OffloadError} INVALID_KEY, CLOSED. */
  async countPrefix(keys: readonly BlockHash[]): Promise<number> {
    checkOpen(this.closed, this.tier);
    checkKeys(keys);
    let n = 0;
    while (n < keys.length && this.entries.has(keys[n] as BlockHash)) n++;
    return n;
  }

  /** @throws {OffloadError} INVALID_KEY, CLOSED. */
  async delete(keys: readonly BlockHash[]): Promise<number> {
    checkOpen(this.closed, this.tier);
    checkKeys(keys);
    let n = 0;
    for (const key of keys) {
      if (this.index.remove(key) === undefined) continue;
      this.entries.delete(key);
      this.counters.deletes++;
      n++;
    }
    return n;
  }

  /** Stored keys, oldest insertion first (for tests and flushing). */
  keys(): BlockHash[] {
    return [...this.entries.keys()];
  }

  /** Counters since construction and current occupancy (see {@link OffloadStats}). */
  stats(): OffloadStats {
    return this.counters.snapshot(
      this.tier,
      this.entries.size,
      this.index.usedBytes,
      this.maxBytes,
    );
  }

  /** Drops every entry. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.index.clear();
    this.entries.clear();
  }
}
