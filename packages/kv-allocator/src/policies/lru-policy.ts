import { InsertionOrderPolicy } from './ordered-policy.js';

/**
 * Least recently used first: the key that became evictable or was hit longest ago goes first.
 * O(1) for every hook (a `Map` keeps insertion order; a touch re-inserts at the tail).
 *
 * `BlockPool` inserts a freed sequence's blocks tail-first, so under LRU a prefix's last blocks
 * are reclaimed before its first ones, which keeps the most shareable part cached longest.
 */
export class LruPolicy<K = number> extends InsertionOrderPolicy<K> {
  readonly name = 'lru';

  insert(key: K): void {
    this.order.delete(key);
    this.order.set(key, true);
  }

  touch(key: K): void {
    if (this.order.delete(key)) this.order.set(key, true);
  }
}
