import { KvAllocatorError } from '../errors.js';
import type { BlockId } from '../types.js';

/** The version of the {@link EvictionPolicy} contract this package implements. */
export const EVICTION_POLICY_SPECIFICATION_VERSION = 'v1';

/**
 * Decides which cached, unreferenced entry to reclaim next: blocks of the GPU pool
 * (`KvCacheManager`), entries of the host and disk offload tiers. The pool tells the policy
 * what became evictable and what was used; the policy only ranks. Write one with
 * {@link defineEvictionPolicy}.
 *
 * Contract (`v1`): `insert(k)` is called when `k` becomes evictable, `touch(k)` on a hit,
 * `remove(k)` when `k` stops being evictable (reused or reclaimed), `forget(k)` after `remove`
 * when its content is gone for good. `chooseVictim()` returns an evictable key (one inserted
 * and not removed) or undefined when there is none, and changes nothing. A policy that breaks
 * this, or throws from any hook, is caught by the pool: it is reported once (`POLICY_VIOLATION`
 * through `onPolicyFailure`) and replaced by the built-in LRU; no block is lost.
 */
export interface EvictionPolicy<K = BlockId> {
  /** The contract version the policy was written against; `'v1'`. */
  readonly specificationVersion: typeof EVICTION_POLICY_SPECIFICATION_VERSION;
  /** Name for stats and logs. */
  readonly name: string;
  /** `key` became evictable (its content is cached and nothing references it). */
  insert(key: K): void;
  /** `key` was used again (a cache hit); policies that count or order by use update here. */
  touch(key: K): void;
  /** `key` is no longer evictable: it was reused, or reclaimed. */
  remove(key: K): void;
  /** The evictable key to reclaim next, or undefined when none. Must not modify state. */
  chooseVictim(): K | undefined;
  /**
   * Optional: the key's content is gone for good (a block reclaimed for new tokens). Policies
   * that remember history across reuse (LFU) drop it here. Called after `remove`.
   */
  forget?(key: K): void;
}

/** The hooks of an {@link EvictionPolicy}, as {@link defineEvictionPolicy} takes them. */
export type EvictionPolicyHooks<K> = Omit<EvictionPolicy<K>, 'specificationVersion'>;

/**
 * Makes an {@link EvictionPolicy} from its hooks, stamped with the contract version.
 *
 * @example
 * ```ts
 * // Most recently freed first (MRU)
 * const keys = new Set<number>();
 * const mru = defineEvictionPolicy<number>({
 *   name: 'mru',
 *   insert: (k) => keys.add(k),
 *   touch: () => {},
 *   remove: (k) => keys.delete(k),
 *   chooseVictim: () => [...keys].at(-1),
 * });
 * ```
 * @throws {KvAllocatorError} INVALID_ARGUMENT naming a missing hook.
 */
export function defineEvictionPolicy<K = BlockId>(
  hooks: EvictionPolicyHooks<K>,
): EvictionPolicy<K> {
  return validateEvictionPolicy<K>({
    ...hooks,
    specificationVersion: EVICTION_POLICY_SPECIFICATION_VERSION,
  });
}

/**
 * Checks that `value` is an {@link EvictionPolicy} of a version this package implements (a
 * policy loaded from a user's module, say) and returns it typed.
 * @throws {KvAllocatorError} INVALID_ARGUMENT naming what is missing or the unsupported version.
 */
export function validateEvictionPolicy<K = BlockId>(value: unknown): EvictionPolicy<K> {
  if (typeof value !== 'object' || value === null) {
    throw new KvAllocatorError('INVALID_ARGUMENT', 'an eviction policy must be an object');
  }
  const v = value as Record<string, unknown>;
  if (v.specificationVersion !== EVICTION_POLICY_SPECIFICATION_VERSION) {
    throw new KvAllocatorError(
      'INVALID_ARGUMENT',
      v.specificationVersion === undefined
        ? `eviction policy has no specificationVersion: make it with defineEvictionPolicy() (or set specificationVersion: '${EVICTION_POLICY_SPECIFICATION_VERSION}')`
        : `eviction policy specificationVersion ${JSON.stringify(v.specificationVersion)} is not supported (this version implements '${EVICTION_POLICY_SPECIFICATION_VERSION}')`,
      { details: { specificationVersion: v.specificationVersion } },
    );
  }
  if (typeof v.name !== 'string' || v.name === '') {
    throw new KvAllocatorError('INVALID_ARGUMENT', 'eviction policy needs a non-empty name');
  }
  for (const hook of ['insert', 'touch', 'remove', 'chooseVictim'] as const) {
    if (typeof v[hook] !== 'function') {
      throw new KvAllocatorError(
        'INVALID_ARGUMENT',
        `eviction policy ${v.name} is missing the function "${hook}" (needs insert, touch, remove, chooseVictim)`,
        { details: { hook } },
      );
    }
  }
  if (v.forget !== undefined && typeof v.forget !== 'function') {
    throw new KvAllocatorError(
      'INVALID_ARGUMENT',
      `eviction policy ${v.name}: forget must be a function`,
    );
  }
  return value as EvictionPolicy<K>;
}
