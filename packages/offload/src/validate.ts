import type { BlockHash, EvictionPolicy } from '@kvasir/kv-allocator';
import { OffloadError } from './errors.js';
import { checkKey } from './keys.js';
import type { KvBlockEntry } from './types.js';

/** @throws {OffloadError} INVALID_KEY, INVALID_VALUE or VALUE_TOO_LARGE naming the entry. */
export function checkEntries(entries: readonly KvBlockEntry[], maxValueBytes: number): void {
  if (!Array.isArray(entries)) {
    throw new OffloadError('INVALID_VALUE', 'putMany expects an array of { key, value } entries');
  }
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i];
    if (typeof e !== 'object' || e === null) {
      throw new OffloadError('INVALID_VALUE', `entry ${i} is not a { key, value } object`);
    }
    checkKey(e.key);
    if (!(e.value instanceof Uint8Array) || e.value.byteLength === 0) {
      throw new OffloadError(
        'INVALID_VALUE',
        `entry ${i} (${e.key}): value must be a non-empty Uint8Array`,
        {
          details: { key: e.key, index: i },
        },
      );
    }
    if (e.value.byteLength > maxValueBytes) {
      throw new OffloadError(
        'VALUE_TOO_LARGE',
        `entry ${i} (${e.key}): ${e.value.byteLength} bytes exceeds this store's limit of ${maxValueBytes}`,
        { details: { key: e.key, index: i, bytes: e.value.byteLength, maxValueBytes } },
      );
    }
  }
}

/** @throws {OffloadError} INVALID_KEY */
export function checkKeys(keys: readonly BlockHash[]): void {
  if (!Array.isArray(keys))
    throw new OffloadError('INVALID_KEY', 'expected an array of block hashes');
  for (const k of keys) checkKey(k);
}

/** @throws {OffloadError} INVALID_OPTIONS */
export function checkBudget(name: string, v: unknown, allowInfinity = false): number {
  if (
    typeof v !== 'number' ||
    !(v > 0) ||
    (!allowInfinity && !Number.isFinite(v)) ||
    Number.isNaN(v)
  ) {
    throw new OffloadError('INVALID_OPTIONS', `${name} must be a positive number of bytes`, {
      details: { [name]: v },
    });
  }
  return v;
}

/** @throws {OffloadError} INVALID_OPTIONS when `policy` lacks one of the four hooks. */
export function checkPolicy<K>(policy: EvictionPolicy<K>): EvictionPolicy<K> {
  for (const hook of ['insert', 'touch', 'remove', 'chooseVictim'] as const) {
    if (typeof (policy as unknown as Record<string, unknown>)[hook] !== 'function') {
      throw new OffloadError('INVALID_OPTIONS', `eviction policy lacks the function "${hook}"`);
    }
  }
  return policy;
}

/** @throws {OffloadError} CLOSED */
export function checkOpen(closed: boolean, tier: string): void {
  if (closed) throw new OffloadError('CLOSED', `the ${tier} store is closed`);
}

/** Runs `fn` over `items` with at most `limit` calls in flight; results keep the input order. */
export async function mapLimit<T, R>(
  items: readonly T[],
  limit: number,
  fn: (item: T, index: number) => Promise<R>,
): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i] as T, i);
    }
  };
  const workers: Promise<void>[] = [];
  for (let w = 0; w < Math.min(limit, items.length); w++) workers.push(worker());
  await Promise.all(workers);
  return out;
}
