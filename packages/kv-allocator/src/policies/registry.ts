import { KvAllocatorError } from '../errors';
import type { EvictionPolicy } from '../types';
import { FifoPolicy } from './fifo-policy';
import { LfuPolicy } from './lfu-policy';
import { LruPolicy } from './lru-policy';

/** Names of the built-in eviction policies. */
export type EvictionPolicyName = 'lru' | 'lfu' | 'fifo';

/**
 * A built-in policy by name.
 * @throws {KvAllocatorError} INVALID_ARGUMENT for an unknown name.
 */
export function createEvictionPolicy<K = number>(name: EvictionPolicyName): EvictionPolicy<K> {
  switch (name) {
    case 'lru':
      return new LruPolicy<K>();
    case 'lfu':
      return new LfuPolicy<K>();
    case 'fifo':
      return new FifoPolicy<K>();
    default:
      throw new KvAllocatorError(
        'INVALID_ARGUMENT',
        `unknown eviction policy "${String(name)}" (expected lru, lfu or fifo)`,
        { details: { name } },
      );
  }
}

/**
 * Checks that `value` satisfies the `EvictionPolicy` contract (four functions), e.g. a policy
 * loaded from a user's module, and returns it typed.
 * @throws {KvAllocatorError} INVALID_ARGUMENT naming the missing hook.
 */
export function validateEvictionPolicy<K = number>(value: unknown): EvictionPolicy<K> {
  if (typeof value !== 'object' || value === null) {
    throw new KvAllocatorError('INVALID_ARGUMENT', 'an eviction policy must be an object');
  }
  for (const hook of ['insert', 'touch', 'remove', 'chooseVictim'] as const) {
    if (typeof (value as Record<string, unknown>)[hook] !== 'function') {
      throw new KvAllocatorError(
        'INVALID_ARGUMENT',
        `eviction policy is missing the function "${hook}" (needs insert, touch, remove, chooseVictim)`,
        { details: { hook } },
      );
    }
  }
  return value as EvictionPolicy<K>;
}
