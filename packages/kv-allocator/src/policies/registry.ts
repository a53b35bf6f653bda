import { KvAllocatorError } from '../errors.js';
import type { EvictionPolicy } from './eviction-policy.js';
import { FifoPolicy } from './fifo-policy.js';
import { LfuPolicy } from './lfu-policy.js';
import { LruPolicy } from './lru-policy.js';

/** Names of the built-in eviction policies. */
export type EvictionPolicyName = 'lru' | 'lfu' | 'fifo';

/** The built-in eviction policies by name, each a factory of a fresh policy. */
export const evictionPolicies: Readonly<Record<EvictionPolicyName, <K>() => EvictionPolicy<K>>> = {
  lru: () => new LruPolicy(),
  lfu: () => new LfuPolicy(),
  fifo: () => new FifoPolicy(),
};

/** True for the name of a built-in eviction policy. */
export const isEvictionPolicyName = (name: string): name is EvictionPolicyName =>
  Object.hasOwn(evictionPolicies, name);

/**
 * A built-in policy by name.
 * @throws {KvAllocatorError} INVALID_ARGUMENT for an unknown name.
 */
export function createEvictionPolicy<K = number>(name: EvictionPolicyName): EvictionPolicy<K> {
  if (!isEvictionPolicyName(name)) {
    throw new KvAllocatorError(
      'INVALID_ARGUMENT',
      `unknown eviction policy "${String(name)}" (expected ${Object.keys(evictionPolicies).join(', ')})`,
      { details: { name } },
    );
  }
  return evictionPolicies[name]<K>();
}
