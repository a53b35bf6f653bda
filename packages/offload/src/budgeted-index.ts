import type { BlockHash, EvictionPolicy } from '@kvasir/kv-allocator';

/**
 * What a budgeted store holds, by key and size, and the policy that ranks it for eviction: the
 * bookkeeping the host and disk stores share. Space can also be reserved for writes in flight
 * (the disk store's), which the budget counts until they commit or fail.
 */
export class BudgetedIndex {
  readonly #sizes = new Map<BlockHash, number>();
  readonly #policy: EvictionPolicy<BlockHash>;
  readonly maxBytes: number;
  #usedBytes = 0;
  #reservedBytes = 0;

  constructor(maxBytes: number, policy: EvictionPolicy<BlockHash>) {
    this.maxBytes = maxBytes;
    this.#policy = policy;
  }

  /** Bytes of the indexed entries. */
  get usedBytes(): number {
    return this.#usedBytes;
  }

  /** Entries indexed. */
  get size(): number {
    return this.#sizes.size;
  }

  has(key: BlockHash): boolean {
    return this.#sizes.has(key);
  }

  /** Indexed keys, oldest insertion first. */
  keys(): IterableIterator<BlockHash> {
    return this.#sizes.keys();
  }

  /** Indexes `key` at `size` bytes (replacing an older entry of it), newest for the policy. */
  insert(key: BlockHash, size: number): void {
    this.remove(key);
    this.#sizes.set(key, size);
    this.#usedBytes += size;
    this.#policy.insert(key);
  }

  /** Tells the policy `key` was used (a hit). */
  touch(key: BlockHash): void {
    this.#policy.touch(key);
  }

  /** Drops `key` from the index; returns its size, or undefined when it was not indexed. */
  remove(key: BlockHash): number | undefined {
    const size = this.#sizes.get(key);
    if (size === undefined) return undefined;
    this.#sizes.delete(key);
    this.#policy.remove(key);
    this.#usedBytes -= size;
    return size;
  }

  /**
   * Takes `bytes` out of the budget for a write in flight, choosing victims as the policy says
   * (dropped from the index at once, so concurrent calls never count the same room twice).
   * Returns the victims, to delete; or undefined, changing nothing, when even an empty index
   * cannot make room (writes in flight hold it). Give the room back with {@link release}.
   */
  reserve(bytes: number): BlockHash[] | undefined {
    if (this.#reservedBytes + bytes > this.maxBytes) return undefined;
    const victims: BlockHash[] = [];
    let guard = this.#sizes.size + 1;
    while (this.#usedBytes + this.#reservedBytes + bytes > this.maxBytes) {
      let victim = this.#policy.chooseVictim();
      if (victim === undefined || !this.#sizes.has(victim) || guard-- <= 0) {
        // The policy lost track of indexed keys (a buggy user policy): fall back to insertion
        // order rather than exceed the budget.
        if (victim !== undefined) this.#policy.remove(victim);
        const first = this.#sizes.keys().next();
        if (first.done) break;
        victim = first.value;
      }
      this.remove(victim);
      victims.push(victim);
    }
    this.#reservedBytes += bytes;
    return victims;
  }

  /** Gives back room taken by {@link reserve} (the write committed, or failed). */
  release(bytes: number): void {
    this.#reservedBytes -= bytes;
  }

  /** Drops every entry. */
  clear(): void {
    for (const key of this.#sizes.keys()) this.#policy.remove(key);
    this.#sizes.clear();
    this.#usedBytes = 0;
  }
}
