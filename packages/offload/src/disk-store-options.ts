import { type BlockHash, type EvictionPolicy, LruPolicy } from '@kvasir/kv-allocator';
import {
  type ChecksumThreads,
  DEFAULT_CHECKSUM_MIN_BYTES,
  resolveChecksumThreads,
} from './checksum-pool.js';
import { checkNamespace } from './keys.js';
import { checkBudget, checkPolicy } from './validate.js';

/** Options of {@link DiskStore}. */
export interface DiskStoreOptions {
  /** Namespace fingerprint from `kvNamespace()`; blocks live under `<dir>/<namespace>/`. */
  readonly namespace: string;
  /** Cache directory; created if missing. Several processes may share it. */
  readonly dir: string;
  /** Byte budget for this namespace's files (headers included), as known to this process. */
  readonly maxBytes: number;
  /** Which block goes first when the budget is full; `LruPolicy` by default. */
  readonly policy?: EvictionPolicy<BlockHash>;
  /** fsync each file before it is renamed into place (default false: a crash may lose recent blocks, never serve a torn one). */
  readonly fsync?: boolean;
  /** Largest accepted value (default: `maxBytes`). */
  readonly maxValueBytes?: number;
  /** File operations in flight at once per call (default 8). */
  readonly concurrency?: number;
  /** Temporary files older than this are left-overs of a crashed writer and removed on open (default 10 minutes). */
  readonly staleTempMs?: number;
  /**
   * Worker threads that compute payload checksums (XXH64) beside the I/O: a count, 0 to hash
   * on the calling thread, or `'auto'` (default): `min(8, cores - 1)` on a machine of more than
   * two cores (`os.availableParallelism()`), none otherwise. Workers start on first use and end
   * on `close()`; they never keep the process alive.
   */
  readonly checksumThreads?: ChecksumThreads;
  /** Smallest payload hashed on a worker thread (default 256 KiB); smaller ones are hashed inline. */
  readonly checksumMinBytes?: number;
}

/** {@link DiskStoreOptions} checked, with their defaults. */
export interface ResolvedDiskStoreOptions {
  readonly namespace: string;
  readonly dir: string;
  readonly maxBytes: number;
  readonly policy: EvictionPolicy<BlockHash>;
  readonly fsync: boolean;
  readonly maxValueBytes: number;
  readonly concurrency: number;
  /** Resolved worker count (0: inline). */
  readonly checksumThreads: number;
  readonly checksumMinBytes: number;
}

/**
 * Checks a disk store's options and fills in their defaults.
 * @throws {OffloadError} INVALID_KEY for a bad namespace; INVALID_OPTIONS for a bad budget,
 *   policy or checksum size.
 */
export function resolveDiskStoreOptions(options: DiskStoreOptions): ResolvedDiskStoreOptions {
  checkNamespace(options.namespace);
  const maxBytes = checkBudget('maxBytes', options.maxBytes);
  const policy = checkPolicy(options.policy ?? new LruPolicy<BlockHash>());
  const maxValueBytes = checkBudget('maxValueBytes', options.maxValueBytes ?? options.maxBytes);
  const c = options.concurrency ?? 8;
  const checksumMinBytes = checkBudget(
    'checksumMinBytes',
    options.checksumMinBytes ?? DEFAULT_CHECKSUM_MIN_BYTES,
    true,
  );
  return {
    namespace: options.namespace,
    dir: options.dir,
    maxBytes,
    policy,
    fsync: options.fsync ?? false,
    maxValueBytes,
    concurrency: Number.isInteger(c) && c >= 1 ? c : 8,
    checksumThreads: resolveChecksumThreads(options.checksumThreads),
    checksumMinBytes,
  };
}
