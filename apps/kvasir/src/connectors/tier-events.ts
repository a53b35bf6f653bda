import type { BlockHash } from '@kvasir/kv-allocator';
import type {
  EvictionListener,
  EvictionSource,
  KvBlockEntry,
  KvBlockStore,
  OffloadStats,
} from '@kvasir/offload';

/** Where an offload tier's block changes go (the KV event publisher's tier side). */
export interface TierEventSink {
  tierStored(medium: string, hashes: readonly BlockHash[]): void;
  tierRemoved(medium: string, hashes: readonly BlockHash[]): void;
}

/**
 * An offload tier that tells `sink` what it stores and loses, for KV events with its `medium`:
 * what `putMany` stored (all of a call, or nothing when some were refused), what it evicts
 * (host and disk budgets), what `delete` removes, and what a read misses (a Redis key expired or
 * evicted by Redis itself, a corrupt entry): the tier does not hold a block it cannot return.
 * Everything else is the tier's own; `TieredStore` sees the same store.
 */
export class AnnouncingStore implements KvBlockStore {
  readonly #inner: KvBlockStore;
  readonly #sink: TierEventSink;
  readonly #medium: string;
  /** Present when the inner store evicts (`TieredStore` demotes through it). */
  readonly onEvict?: (listener: EvictionListener) => () => void;
  /** Present when the inner store lists its keys (`TieredStore.flush`). */
  readonly keys?: () => BlockHash[];

  constructor(inner: KvBlockStore, medium: string, sink: TierEventSink) {
    this.#inner = inner;
    this.#sink = sink;
    this.#medium = medium;
    const source = inner as Partial<EvictionSource>;
    if (typeof source.onEvict === 'function') {
      const onEvict = source.onEvict.bind(inner);
      onEvict((key) => sink.tierRemoved(medium, [key]));
      this.onEvict = onEvict;
    }
    const lister = inner as { keys?: () => BlockHash[] };
    if (typeof lister.keys === 'function') this.keys = lister.keys.bind(inner);
  }

  get tier(): string {
    return this.#inner.tier;
  }

  get namespace(): string {
    return this.#inner.namespace;
  }

  get maxValueBytes(): number {
    return this.#inner.maxValueBytes;
  }

  async putMany(entries: readonly KvBlockEntry[]): Promise<number> {
    const stored = await this.#inner.putMany(entries);
    if (stored === entries.length && stored > 0) {
      this.#sink.tierStored(
        this.#medium,
        entries.map((e) => e.key),
      );
    }
    return stored;
  }

  async getMany(keys: readonly BlockHash[]): Promise<(Uint8Array | undefined)[]> {
    const values = await this.#inner.getMany(keys);
    const missing = keys.filter((_, i) => values[i] === undefined);
    if (missing.length > 0) this.#sink.tierRemoved(this.#medium, missing);
    return values;
  }

  has(key: BlockHash): Promise<boolean> {
    return this.#inner.has(key);
  }

  countPrefix(keys: readonly BlockHash[]): Promise<number> {
    return this.#inner.countPrefix(keys);
  }

  async delete(keys: readonly BlockHash[]): Promise<number> {
    const n = await this.#inner.delete(keys);
    this.#sink.tierRemoved(this.#medium, keys);
    return n;
  }

  stats(): OffloadStats {
    return this.#inner.stats();
  }

  close(): Promise<void> {
    return this.#inner.close();
  }
}
