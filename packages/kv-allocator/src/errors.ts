import { KvasirError } from '@kvasir/errors';

/** Stable reasons a `KvAllocatorError` is thrown. */
export type KvAllocatorErrorCode =
  | 'INVALID_ARGUMENT'
  | 'INVALID_TOKEN'
  | 'UNKNOWN_SEQUENCE'
  | 'SEQUENCE_EXISTS'
  | 'DOUBLE_FREE'
  | 'STALE_PREFIX'
  | 'POLICY_VIOLATION'
  | 'OUT_OF_BLOCKS';

/**
 * Thrown by @kvasir/kv-allocator for misuse, or (`OUT_OF_BLOCKS`) when an operation that cannot
 * report failure in its result runs out of blocks. The manager's state is unchanged when it is
 * thrown. `POLICY_VIOLATION` is never thrown: it is what `BlockPool` reports (`onPolicyFailure`)
 * when it replaces an eviction policy that broke its contract.
 */
export class KvAllocatorError extends KvasirError<KvAllocatorErrorCode> {}

/** @throws {KvAllocatorError} INVALID_ARGUMENT unless `value` is an integer ≥ `min`. */
export function assertInteger(name: string, value: number, min = 0): void {
  if (!Number.isInteger(value) || value < min) {
    throw new KvAllocatorError(
      'INVALID_ARGUMENT',
      `${name} must be an integer ≥ ${min}, got ${String(value)}`,
      { details: { [name]: value } },
    );
  }
}
