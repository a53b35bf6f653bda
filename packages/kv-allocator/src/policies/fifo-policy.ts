import { InsertionOrderPolicy } from './ordered-policy.js';

/**
 * First in, first out: the key that became evictable first goes first; hits do not reorder.
 * Cheap and scan-resistant for one-shot prompts, but a hot system prompt can be evicted.
 */
export class FifoPolicy<K = number> extends InsertionOrderPolicy<K> {
  readonly name = 'fifo';

  insert(key: K): void {
    if (!this.order.has(key)) this.order.set(key, true);
  }

  touch(_key: K): void {}
}
