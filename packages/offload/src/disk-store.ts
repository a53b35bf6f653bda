import { randomBytes } from 'node:crypto';
import type { FileHandle } from 'node:fs/promises';
import { access, constants, open, readdir, rename, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { type BlockHash, type EvictionPolicy, LruPolicy } from '@kvasir/kv-allocator';
import { BudgetedIndex } from './budgeted-index.js';
import {
  Checksummer,
  type ChecksumThreads,
  DEFAULT_CHECKSUM_MIN_BYTES,
  resolveChecksumThreads,
} from './checksum-pool.js';
import {
  describeFsError,
  errno,
  makeDirectory,
  readFully,
  writeFully,
  writeHeader,
} from './disk-files.js';
import { OffloadError } from './errors.js';
import {
  checkFrameHeader,
  encodeFrameHeader,
  FRAME_HEADER_BYTES,
  type FrameFault,
  payloadLengthFault,
  payloadMatches,
} from './frame.js';
import { checkNamespace } from './keys.js';
import { Counters } from './stats.js';
import type {
  EvictionListener,
  EvictionSource,
  KvBlockEntry,
  KvBlockStore,
  OffloadStats,
} from './types.js';
import {
  checkBudget,
  checkEntries,
  checkKeys,
  checkOpen,
  checkPolicy,
  mapLimit,
} from './validate.js';

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

const BLOCK_FILE = /^([0-9a-f]{32})\.kvb$/;
const TEMP_FILE = /\.tmp$/;

// Stands in for the header while a worker hashes the payload from the file (never renamed into
// place like this: the real header is written over it first).
const BLANK_HEADER = new Uint8Array(FRAME_HEADER_BYTES);

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
    checkNamespace(options.namespace);
    this.namespace = options.namespace;
    this.dir = options.dir;
    this.nsDir = join(options.dir, options.namespace);
    this.maxBytes = checkBudget('maxBytes', options.maxBytes);
    this.index = new BudgetedIndex(
      this.maxBytes,
      checkPolicy(options.policy ?? new LruPolicy<BlockHash>()),
    );
    this.fsync = options.fsync ?? false;
    this.maxValueBytes = checkBudget('maxValueBytes', options.maxValueBytes ?? options.maxBytes);
    const c = options.concurrency ?? 8;
    this.concurrency = Number.isInteger(c) && c >= 1 ? c : 8;
    const minBytes = checkBudget(
      'checksumMinBytes',
      options.checksumMinBytes ?? DEFAULT_CHECKSUM_MIN_BYTES,
      true,
    );
    this.checksum = new Checksummer(resolveChecksumThreads(options.checksumThreads), minBytes);
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
    const found: { key: BlockHash; size: number; mtime: number }[] = [];
    const now = Date.now();
    for (const sub of await readdir(this.nsDir, { withFileTypes: true })) {
      if (!sub.isDirectory() || !/^[0-9a-f]{2}$/.test(sub.name)) continue;
      const subDir = join(this.nsDir, sub.name);
      this.madeDirs.add(subDir);
      let names: string[];
      try {
        names = await readdir(subDir);
      } catch {
        continue; // removed by another process meanwhile
      }
      for (const name of names) {
        const path = join(subDir, name);
        const m = BLOCK_FILE.exec(name);
        if (m === null && !TEMP_FILE.test(name)) continue;
        let st: Awaited<ReturnType<typeof stat>>;
        try {
          st = await stat(path);
        } catch {
          continue;
        }
        if (m === null) {
          if (now - st.mtimeMs > staleTempMs) await unlink(path).catch(() => undefined);
          continue;
        }
        const key = m[1] as BlockHash;
        if (key.slice(0, 2) === sub.name) found.push({ key, size: st.size, mtime: st.mtimeMs });
      }
    }
    found.sort((a, b) => a.mtime - b.mtime);
    for (const f of found) this.index.insert(f.key, f.size);
    const victims = this.index.reserve(0);
    await this.discard(victims ?? []);
  }

  private pathOf(key: BlockHash): string {
    return join(this.nsDir, key.slice(0, 2), `${key}.kvb`);
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
    const sub = join(this.nsDir, key.slice(0, 2));
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
    const path = this.pathOf(key);
    const tmp = `${path}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
    let ok = false;
    try {
      await this.discard(victims);
      await this.ensureDir(key);
      let fh: FileHandle;
      try {
        fh = await open(tmp, 'wx+'); // readable too: a checksum worker reads it back
      } catch (e) {
        if (errno(e) !== 'ENOENT') throw e;
        // Our cached directory was removed by someone else: recreate it once.
        this.madeDirs.delete(join(this.nsDir, key.slice(0, 2)));
        await this.ensureDir(key);
        fh = await open(tmp, 'wx+');
      }
      try {
        if (this.checksum.offloads(value.byteLength)) {
          // The payload goes first, behind a blank header; a worker hashes it from the file (the
          // page cache) and the real header is written over the blank one before the rename.
          // This thread copies nothing and hashes nothing.
          await writeFully(fh, BLANK_HEADER, value);
          const sum = await this.checksum.ofFile(fh.fd, FRAME_HEADER_BYTES, value);
          if (sum === undefined) throw new Error('the temporary file is shorter than was written');
          await writeHeader(fh, encodeFrameHeader(this.namespace, key, value, sum));
        } else {
          // Inline, checksummed right before it is written, so the kernel copies bytes still in cache.
          await writeFully(fh, encodeFrameHeader(this.namespace, key, value), value);
        }
        if (this.fsync) await fh.sync();
      } finally {
        await fh.close();
      }
      await rename(tmp, path);
      ok = true;
    } catch {
      this.counters.errors++;
      await unlink(tmp).catch(() => undefined);
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
    let fh: FileHandle;
    try {
      fh = await open(path, 'r');
    } catch (e) {
      if (errno(e) !== 'ENOENT') this.counters.errors++;
      if (track) this.forget(key);
      return undefined;
    }
    let payload: Buffer;
    let ino: number;
    let size: number;
    let fault: FrameFault | undefined;
    // The digest (undefined: the file turned out shorter than its header said) and the bytes.
    let hashing: Promise<{ sum: bigint | undefined; data: Buffer }> | undefined;
    let promised: { readonly len: number; readonly sum: bigint } | undefined;
    let keepOpen = false;
    try {
      const st = await fh.stat();
      ino = st.ino;
      // A block of another length than the caller's target: a miss, the file left alone.
      if (into !== undefined && st.size - FRAME_HEADER_BYTES !== into.byteLength) return undefined;
      // Header and payload in one readv, the payload into a buffer of exactly its own size (or
      // the caller's target): no copy, and the caller's array is the block and nothing else.
      const header = Buffer.allocUnsafe(Math.min(st.size, FRAME_HEADER_BYTES));
      payload =
        into === undefined
          ? Buffer.allocUnsafeSlow(Math.max(0, st.size - FRAME_HEADER_BYTES))
          : Buffer.from(into.buffer, into.byteOffset, into.byteLength);
      size = await readFully(fh, header, payload);
      // Verified at once, while the bytes just read are still in cache.
      const checked = checkFrameHeader(header.subarray(0, size), this.namespace, key);
      if (!checked.ok) fault = checked.fault;
      else {
        if (size < st.size) payload = payload.subarray(0, size - header.byteLength);
        fault = payloadLengthFault(payload, checked);
        if (fault === undefined) {
          promised = checked;
          const read = payload;
          // The payload buffer is this store's alone: on a worker it is moved there and back
          // (while the file is closed). The caller's target cannot move: a worker hashes the
          // same bytes from the file, which stays open (and, renamed into place whole, never
          // changes) until the digest is back. Inline both are hashed here and now.
          hashing =
            into === undefined
              ? this.checksum.ofOwned(payload)
              : this.checksum
                  .ofFile(fh.fd, FRAME_HEADER_BYTES, payload)
                  .then((sum) => ({ sum, data: read }));
          hashing.catch(() => undefined); // awaited below
          keepOpen = into !== undefined;
        }
      }
    } catch {
      this.counters.errors++;
      return undefined;
    } finally {
      // Closed now unless a worker still reads it (into a target): then after the digest.
      if (!keepOpen) await fh.close().catch(() => undefined);
    }
    if (hashing !== undefined && promised !== undefined) {
      try {
        const hashed = await hashing;
        payload = hashed.data;
        fault =
          hashed.sum === undefined ? 'truncated' : payloadMatches(payload, promised, hashed.sum);
      } catch {
        this.counters.errors++; // a checksum worker failed: a miss, the file kept
        return undefined;
      } finally {
        if (keepOpen) await fh.close().catch(() => undefined);
      }
    }
    if (fault !== undefined) {
      if (fault === 'foreign') this.counters.foreign++;
      else this.counters.corrupt++;
      await this.unlinkIfSame(path, ino);
      if (track) this.forget(key);
      return undefined;
    }
    if (track) {
      if (this.index.has(key)) this.index.touch(key);
      else this.adopt(key, size);
      this.counters.bytesRead += size;
    }
    return payload;
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

  private async unlinkIfSame(path: string, ino: number): Promise<void> {
    try {
      const st = await stat(path);
      // Another process may have renamed a good file over the bad one since we read it.
      if (st.ino === ino) await unlink(path);
    } catch {
      // already gone
    }
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
