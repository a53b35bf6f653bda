import type { EvictionPolicy } from '../types';

/**
 * First in, first out: the key that became evictable first goes first; hits do not reorder.
 * Cheap and scan-resistant for one-shot prompts, but a hot system prompt can be evicted.
 */
export class FifoPolicy<K = number> implements EvictionPolicy<K> {
  readonly name = 'fifo';
  private readonly order = new Map<K, true>();

  insert(key: K): void {
    if (!this.order.has(key)) this.order.set(key, true);
  }

  touch(_key: K): void {}

  remove(key: K): void {
    this.order.delete(key);
  }

  chooseVictim(): K | undefined {
    for (const key of this.order.keys()) return key;
    return undefined;
  }

  /** Number of evictable keys tracked. */
  get size(): number {
    return this.order.size;
  }
}
