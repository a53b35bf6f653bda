import { access, constants, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import type { BlockHash } from '@kvasir/kv-allocator';
import {
  blockFileDir,
  blockFilePath,
  readBlockFile,
  scanBlockFiles,
  unlinkIfSame,
  writeBlockFile,
} from './block-file.js';
import { BudgetedIndex } from './budgeted-index.js';
import { Checksummer } from './checksum-pool.js';
import { describeFsError, errno, makeDirectory } from './disk-files.js';
import { type DiskStoreOptions, resolveDiskStoreOptions } from './disk-store-options.js';
import { OffloadError } from './errors.js';
import { FRAME_HEADER_BYTES } from './frame.js';
import { Counters } from './stats.js';
import type {
  EvictionListener,
  EvictionSource,
  KvBlockEntry,
  KvBlockStore,
  OffloadStats,
} from './types.js';
import { checkEntries, checkKeys, checkOpen, mapLimit } from './validate.js';

/**
 * KV blocks as files: `<dir>/<namespace>/<first two hex>/<hash>.kvb`, each a framed value
 * (header with namespace, key, length and XXH64, then the payload). A block is written to a
 * unique temporary name and renamed into place, so readers see the old file, the new file or
 * nothing, never part of one. The index is rebuilt from the directory on open, so a restart
 * keeps the cache. Several processes may share the directory: files that vanish are misses,
 * files that appear are found (every read goes to the file system, not only to the index), and
 * a corrupt file is deleted only if it is still the one that was read.
 */
export class DiskStore implements KvBlockStore, EvictionSource {
  readonly tier = 'disk';
  readonly namespace: string;
  readonly dir: string;
  readonly maxBytes: number;
  private readonly nsDir: string;
  private readonly fsync: boolean;
  readonly maxValueBytes: number;
  private readonly concurrency: number;
  private readonly index: BudgetedIndex;
  private readonly listeners = new Set<EvictionListener>();
  private readonly counters = new Counters();
  private readonly madeDirs = new Set<string>();
  private readonly checksum: Checksummer;
  private closed = false;

  private constructor(options: DiskStoreOptions) {
    const o = resolveDiskStoreOptions(options);
    this.namespace = o.namespace;
    this.dir = o.dir;
    this.nsDir = join(o.dir, o.namespace);
    this.maxBytes = o.maxBytes;
    this.index = new BudgetedIndex(o.maxBytes, o.policy);
    this.fsync = o.fsync;
    this.maxValueBytes = o.maxValueBytes;
    this.concurrency = o.concurrency;
    this.checksum = new Checksummer(o.checksumThreads, o.checksumMinBytes);
  }

  /** Worker threads this store hashes payloads on (at most; 0: all on the calling thread). */
  get checksumThreads(): number {
    return this.checksum.threads;
  }

  /**
   * Opens (creating if needed) the store and rebuilds its index from the directory, oldest file
   * first into the policy; evicts down to the budget if the directory holds more.
   * @throws {OffloadError} INVALID_KEY, INVALID_OPTIONS for bad options; UNAVAILABLE (the
   *   file-system error as its `cause`) when the directory cannot be created, is not a
   *   directory, or cannot be listed or written.
   */
  static async open(options: DiskStoreOptions): Promise<DiskStore> {
    const store = new DiskStore(options);
    try {
      await store.rebuild(options.staleTempMs ?? 10 * 60_000);
    } catch (e) {
      await store.close();
      throw new OffloadError(
        'UNAVAILABLE',
        `disk store directory ${options.dir} cannot be used: ${describeFsError(e)}`,
        { cause: e, details: { dir: options.dir, errno: errno(e) } },
      );
    }
    return store;
  }

  private async rebuild(staleTempMs: number): Promise<void> {
    await makeDirectory(this.nsDir);
    // Checked now: a directory that cannot be written would only show up as misses later.
    await access(this.nsDir, constants.W_OK | constants.X_OK);
    const { files, dirs } = await scanBlockFiles(this.nsDir, staleTempMs);
    for (const dir of dirs) this.madeDirs.add(dir);
    for (const f of files) this.index.insert(f.key, f.size);
    const victims = this.index.reserve(0);
    await this.discard(victims ?? []);
  }

  private pathOf(key: BlockHash): string {
    return blockFilePath(this.nsDir, key);
  }

  /** {@inheritDoc EvictionSource.onEvict} */
  onEvict(listener: EvictionListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private async discard(victims: readonly BlockHash[]): Promise<void> {
    for (const key of victims) {
      const path = this.pathOf(key);
      if (this.listeners.size > 0) {
        const value = await this.readVerified(key, path, false);
        if (value !== undefined) {
          for (const l of this.listeners) {
            try {
              l(key, value);
            } catch {
              // A listener's failure must not stop the eviction.
            }
          }
        }
      }
      try {
        await unlink(path);
        this.counters.evictions++;
      } catch (e) {
        if (errno(e) !== 'ENOENT') this.counters.errors++;
      }
    }
  }

  private async ensureDir(key: BlockHash): Promise<void> {
    const sub = blockFileDir(this.nsDir, key);
    if (this.madeDirs.has(sub)) return;
    await makeDirectory(sub);
    this.madeDirs.add(sub);
  }

  private async writeOne(key: BlockHash, value: Uint8Array): Promise<boolean> {
    const size = FRAME_HEADER_BYTES + value.byteLength;
    // The old file of this key is replaced, not kept beside the new one: free its share first
    // (should the write fail, the old file is adopted again when next read).
    this.forget(key);
    const victims = this.index.reserve(size);
    if (victims === undefined) return false;
    let ok = false;
    try {
      await this.discard(victims);
      await this.ensureDir(key);
      await writeBlockFile(this.pathOf(key), {
        namespace: this.namespace,
        key,
        value,
        checksum: this.checksum,
        fsync: this.fsync,
        recreateDir: () => {
          // Our cached directory was removed by someone else: recreate it once.
          this.madeDirs.delete(blockFileDir(this.nsDir, key));
          return this.ensureDir(key);
        },
      });
      ok = true;
    } catch {
      this.counters.errors++;
    } finally {
      this.index.release(size);
    }
    if (!ok) return false;
    this.index.insert(key, size);
    this.counters.puts++;
    this.counters.bytesWritten += size;
    return true;
  }

  /**
   * Writes each block to a temporary file and renames it into place, evicting to stay within
   * the budget. A failed write leaves nothing visible and is counted in `errors`.
   * @throws {OffloadError} INVALID_KEY, INVALID_VALUE, VALUE_TOO_LARGE, CLOSED.
   */
  async putMany(entries: readonly KvBlockEntry[]): Promise<number> {
    checkOpen(this.closed, this.tier);
    checkEntries(entries, this.maxValueBytes);
    const done = await mapLimit(entries, this.concurrency, (e) => this.writeOne(e.key, e.value));
    let n = 0;
    for (const d of done) if (d) n++;
    return n;
  }

  /**
   * Reads and verifies `path`; a corrupt or foreign file is deleted (if still the same file)
   * and counted. `track` updates the index, policy and hit/miss counters.
   */
  private async readVerified(
    key: BlockHash,
    path: string,
    track: boolean,
    into?: Uint8Array,
  ): Promise<Uint8Array | undefined> {
    const read = await readBlockFile(path, this.namespace, key, this.checksum, into);
    switch (read.kind) {
      case 'missing':
        if (read.error) this.counters.errors++;
        if (track) this.forget(key);
        return undefined;
      case 'other-length':
        return undefined;
      case 'error':
        this.counters.errors++;
        return undefined;
      case 'fault':
        if (read.fault === 'foreign') this.counters.foreign++;
        else this.counters.corrupt++;
        await unlinkIfSame(path, read.ino);
        if (track) this.forget(key);
        return undefined;
      case 'ok':
        if (track) {
          if (this.index.has(key)) this.index.touch(key);
          else this.adopt(key, read.size);
          this.counters.bytesRead += read.size;
        }
        return read.payload;
    }
  }

  // A file another process wrote: index it so the budget and policy know about it.
  private adopt(key: BlockHash, size: number): void {
    const victims = this.index.reserve(size);
    if (victims === undefined) return;
    this.index.release(size);
    this.index.insert(key, size);
    void this.discard(victims);
  }

  private forget(key: BlockHash): void {
    this.index.remove(key);
  }

  /**
   * Reads and verifies blocks. Each returned array is a fresh buffer the caller owns.
   * @throws {OffloadError} INVALID_KEY, CLOSED.
   */
  async getMany(keys: readonly BlockHash[]): Promise<(Uint8Array | undefined)[]> {
    checkOpen(this.closed, this.tier);
    checkKeys(keys);
    return this.countHits(
      await mapLimit(keys, this.concurrency, (k) => this.readVerified(k, this.pathOf(k), true)),
    );
  }

  private countHits<T>(out: T[]): T[] {
    for (const v of out) {
      if (v === undefined) this.counters.misses++;
      else this.counters.hits++;
    }
    return out;
  }

  /**
   * Reads and verifies blocks straight into the caller's buffers (a staging area reused from
   * step to step, say): no allocation and no copy, where {@link DiskStore.getMany} hands back a
   * fresh buffer per block. `targets[i]` receives block `keys[i]`, must be exactly as long as
   * the block, and must not overlap another target. A caller's buffer cannot move to a
   * checksum worker: with workers, one hashes the same bytes from the still-open file; inline,
   * the calling thread hashes the target, in place when it is a `stagingBuffers()` buffer.
   * @returns per key, whether the block was read and verified into its target. On `false` (a
   *   miss, a corrupt or foreign entry, deleted as by `getMany`, or a stored block of another
   *   length, left alone) the target's bytes are unspecified.
   * @throws {OffloadError} INVALID_KEY, INVALID_VALUE (not one `Uint8Array` target per key),
   *   CLOSED.
   */
  async getManyInto(
    keys: readonly BlockHash[],
    targets: readonly Uint8Array[],
  ): Promise<boolean[]> {
    checkOpen(this.closed, this.tier);
    checkKeys(keys);
    if (
      !Array.isArray(targets) ||
      targets.length !== keys.length ||
      !targets.every((t) => t instanceof Uint8Array)
    ) {
      throw new OffloadError(
        'INVALID_VALUE',
        `expected one Uint8Array target per key (${keys.length} keys)`,
      );
    }
    const out = await mapLimit(keys, this.concurrency, (k, i) =>
      this.readVerified(k, this.pathOf(k), true, targets[i]),
    );
    return this.countHits(out).map((v) => v !== undefined);
  }

  private async exists(key: BlockHash): Promise<boolean> {
    try {
      await stat(this.pathOf(key));
      return true;
    } catch (e) {
      if (errno(e) !== 'ENOENT') this.counters.errors++;
      this.forget(key);
      return false;
    }
  }

  /** Whether the block's file exists (its content is verified only when read). @throws {OffloadError} INVALID_KEY, CLOSED. */
  async has(key: BlockHash): Promise<boolean> {
    checkOpen(this.closed, this.tier);
    checkKeys([key]);
    return this.exists(key);
  }

  /** @throws {OffloadError} INVALID_KEY, CLOSED. */
  async countPrefix(keys: readonly BlockHash[]): Promise<number> {
    checkOpen(this.closed, this.tier);
    checkKeys(keys);
    let n = 0;
    // Files are checked a chunk at a time so a long prefix costs few waits, a short one little work.
    const chunk = 32;
    while (n < keys.length) {
      const part = keys.slice(n, n + chunk);
      const present = await Promise.all(part.map((k) => this.exists(k)));
      for (const p of present) {
        if (!p) return n;
        n++;
      }
    }
    return n;
  }

  /** @throws {OffloadError} INVALID_KEY, CLOSED. */
  async delete(keys: readonly BlockHash[]): Promise<number> {
    checkOpen(this.closed, this.tier);
    checkKeys(keys);
    let n = 0;
    for (const key of keys) {
      this.forget(key);
      try {
        await unlink(this.pathOf(key));
        this.counters.deletes++;
        n++;
      } catch (e) {
        if (errno(e) !== 'ENOENT') this.counters.errors++;
      }
    }
    return n;
  }

  /** Indexed keys, in index order (for tests and flushing). */
  keys(): BlockHash[] {
    return [...this.index.keys()];
  }

  /** The file path of a block (for tests and tools). */
  filePath(key: BlockHash): string {
    return this.pathOf(key);
  }

  /** Counters since construction and current occupancy (see {@link OffloadStats}). */
  stats(): OffloadStats {
    return this.counters.snapshot(this.tier, this.index.size, this.index.usedBytes, this.maxBytes);
  }

  /**
   * Stops accepting calls and ends the checksum workers (a read or write still in flight then
   * answers a miss or is not stored); files stay for the next open. Idempotent.
   */
  async close(): Promise<void> {
    this.closed = true;
    await this.checksum.close();
  }
}
