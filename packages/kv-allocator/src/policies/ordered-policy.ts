import { EVICTION_POLICY_SPECIFICATION_VERSION, type EvictionPolicy } from './eviction-policy.js';

/**
 * A policy whose victim is the first key of a `Map` in insertion order: subclasses decide only
 * what `insert` and `touch` do to that order. O(1) for every hook.
 */
export abstract class InsertionOrderPolicy<K> implements EvictionPolicy<K> {
  readonly specificationVersion = EVICTION_POLICY_SPECIFICATION_VERSION;
  abstract readonly name: string;
  /** Evictable keys, the next victim first. */
  protected readonly order = new Map<K, true>();

  abstract insert(key: K): void;

  abstract touch(key: K): void;

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
