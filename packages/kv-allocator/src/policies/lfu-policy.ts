import { EVICTION_POLICY_SPECIFICATION_VERSION, type EvictionPolicy } from './eviction-policy.js';

/** Options of `LfuPolicy`. */
export interface LfuPolicyOptions {
  /**
   * Use counts are remembered for keys that are not evictable right now (in use, or reused
   * after a hit) so a hot prefix keeps its count across reuse. At most this many such counts are
   * kept; the oldest are dropped first. Default 65,536.
   */
  readonly historyCapacity?: number;
}

/**
 * Least frequently used first; ties go to the least recently inserted or touched key.
 * A key's count starts at 1 and grows by one per `touch` (cache hit). `forget(key)` drops the
 * count when the key's content is gone (the block was reclaimed and will hold new tokens).
 */
export class LfuPolicy<K = number> implements EvictionPolicy<K> {
  readonly specificationVersion = EVICTION_POLICY_SPECIFICATION_VERSION;
  readonly name = 'lfu';
  /** count → keys with that count, in least-recent-first order. */
  private readonly buckets = new Map<number, Map<K, true>>();
  private readonly counts = new Map<K, number>();
  /** Counts of keys that are not currently evictable. */
  private readonly history = new Map<K, number>();
  private readonly historyCapacity: number;
  private minCount = Number.POSITIVE_INFINITY;

  constructor(options: LfuPolicyOptions = {}) {
    this.historyCapacity = options.historyCapacity ?? 65_536;
  }

  insert(key: K): void {
    if (this.counts.has(key)) return;
    const count = this.history.get(key) ?? 1;
    this.history.delete(key);
    this.place(key, count);
  }

  touch(key: K): void {
    const count = this.counts.get(key);
    if (count !== undefined) {
      this.unplace(key, count);
      this.place(key, count + 1);
    } else {
      this.remember(key, (this.history.get(key) ?? 1) + 1);
    }
  }

  remove(key: K): void {
    const count = this.counts.get(key);
    if (count === undefined) return;
    this.unplace(key, count);
    this.remember(key, count);
  }

  /** The key's content is gone: drop its count entirely. */
  forget(key: K): void {
    this.remove(key);
    this.history.delete(key);
  }

  chooseVictim(): K | undefined {
    if (this.counts.size === 0) return undefined;
    const bucket = this.buckets.get(this.minCount);
    if (bucket) for (const key of bucket.keys()) return key;
    return undefined;
  }

  /** Current use count of `key` (evictable or remembered), 0 when unknown. */
  countOf(key: K): number {
    return this.counts.get(key) ?? this.history.get(key) ?? 0;
  }

  /** Number of evictable keys tracked. */
  get size(): number {
    return this.counts.size;
  }

  private place(key: K, count: number): void {
    let bucket = this.buckets.get(count);
    if (!bucket) {
      bucket = new Map();
      this.buckets.set(count, bucket);
    }
    bucket.set(key, true);
    this.counts.set(key, count);
    if (count < this.minCount) this.minCount = count;
  }

  private unplace(key: K, count: number): void {
    const bucket = this.buckets.get(count);
    bucket?.delete(key);
    this.counts.delete(key);
    if (bucket && bucket.size === 0) {
      this.buckets.delete(count);
      if (count === this.minCount) this.recomputeMin();
    }
  }

  private recomputeMin(): void {
    let min = Number.POSITIVE_INFINITY;
    for (const c of this.buckets.keys()) if (c < min) min = c;
    this.minCount = min;
  }

  private remember(key: K, count: number): void {
    this.history.delete(key);
    this.history.set(key, count);
    if (this.history.size > this.historyCapacity) {
      for (const oldest of this.history.keys()) {
        this.history.delete(oldest);
        break;
      }
    }
  }
}
