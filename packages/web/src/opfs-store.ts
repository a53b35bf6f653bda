// The KV tier in the Origin Private File System: one file per block, `<namespace>/<hash>.kvb`
// under `kvasir-kv/`, each holding the offload package's frame (namespace fingerprint, block
// hash, length and XXH64 in a CRC-checked header, then the block's bytes), as the disk tier
// writes it. Files outlive the page, so a reload or another tab of the origin finds the blocks.
import type { BlockHash } from '@kvasir/kv-allocator';
import { LruPolicy } from '@kvasir/kv-allocator';
import {
  BudgetedIndex,
  Counters,
  checkBudget,
  checkEntries,
  checkKeys,
  checkOpen,
  decodeFrame,
  encodeFrame,
  FRAME_HEADER_BYTES,
  type KvBlockEntry,
  type KvBlockStore,
  type OffloadStats,
} from '@kvasir/offload/portable';

/** The folder under the origin's OPFS root that holds every model's blocks. */
export const OPFS_KV_DIR = 'kvasir-kv';
const BLOCK_FILE = /^([0-9a-f]{32})\.kvb$/;

/** Options of {@link OpfsStore.open}. */
export interface OpfsStoreOptions {
  /** The namespace fingerprint (`kvNamespaceAsync`): model, weights and KV layout. */
  readonly namespace: string;
  /** Bytes the namespace's files may take (files evicted oldest-used first beyond it). */
  readonly maxBytes: number;
  /** The OPFS root (default `navigator.storage.getDirectory()`). */
  readonly root?: FileSystemDirectoryHandle;
}

const notFound = (e: unknown) =>
  (e as { name?: string }).name === 'NotFoundError' ||
  (e as { name?: string }).name === 'TypeMismatchError';

/**
 * A `KvBlockStore` over the Origin Private File System. A write goes through `createWritable`,
 * whose swap file replaces the block's file only when closed, so a reader sees a whole block or
 * none. Every read checks the frame: another namespace (another model or layout), another key,
 * a bad header CRC, a short file or a payload whose XXH64 differs is a miss (counted `foreign`
 * or `corrupt`) and the file is deleted; never wrong bytes.
 *
 * The budget is this tab's view: blocks another tab writes meanwhile are found (every lookup
 * asks the file system) and counted from then on.
 */
export class OpfsStore implements KvBlockStore {
  readonly tier = 'opfs';
  readonly namespace: string;
  readonly maxValueBytes: number;
  readonly #dir: FileSystemDirectoryHandle;
  readonly #index: BudgetedIndex;
  readonly #counters = new Counters();
  readonly #writes = new Set<Promise<unknown>>();
  #closed = false;

  private constructor(namespace: string, dir: FileSystemDirectoryHandle, maxBytes: number) {
    this.namespace = namespace;
    this.#dir = dir;
    this.#index = new BudgetedIndex(maxBytes, new LruPolicy<BlockHash>());
    this.maxValueBytes = Math.max(0, maxBytes - FRAME_HEADER_BYTES);
  }

  /**
   * Opens (creating) the namespace's folder and indexes the blocks already there, oldest first.
   * @throws {OffloadError} INVALID_KEY for a namespace that is not a fingerprint, INVALID_OPTIONS
   *   for a bad budget; the file system's error when OPFS cannot be opened.
   */
  static async open(options: OpfsStoreOptions): Promise<OpfsStore> {
    checkKeys([options.namespace as BlockHash]);
    const maxBytes = checkBudget('maxBytes', options.maxBytes);
    const root = options.root ?? (await navigator.storage.getDirectory());
    const base = await root.getDirectoryHandle(OPFS_KV_DIR, { create: true });
    const dir = await base.getDirectoryHandle(options.namespace, { create: true });
    const store = new OpfsStore(options.namespace, dir, maxBytes);
    const found: { key: BlockHash; size: number; at: number }[] = [];
    // `entries()` is in the DOM.AsyncIterable library, which this package does not compile with.
    const entries = (dir as unknown as { entries(): AsyncIterable<[string, FileSystemHandle]> })
      .entries;
    for await (const [name, handle] of entries.call(dir)) {
      const m = BLOCK_FILE.exec(name);
      if (!m || handle.kind !== 'file') continue;
      const file = await (handle as FileSystemFileHandle).getFile();
      found.push({ key: m[1] as BlockHash, size: file.size, at: file.lastModified });
    }
    found.sort((a, b) => a.at - b.at);
    for (const f of found) store.#index.insert(f.key, f.size);
    await store.#evict(0);
    return store;
  }

  async putMany(entries: readonly KvBlockEntry[]): Promise<number> {
    checkOpen(this.#closed, this.tier);
    checkEntries(entries, this.maxValueBytes);
    const write = this.#putAll(entries);
    this.#writes.add(write);
    try {
      return await write;
    } finally {
      this.#writes.delete(write);
    }
  }

  async #putAll(entries: readonly KvBlockEntry[]): Promise<number> {
    let stored = 0;
    for (const { key, value } of entries) {
      const frame = encodeFrame(this.namespace, key, value);
      this.#index.remove(key);
      const victims = this.#index.reserve(frame.byteLength);
      if (victims === undefined) continue;
      await this.#remove(victims, 'evictions');
      try {
        const handle = await this.#dir.getFileHandle(`${key}.kvb`, { create: true });
        const writable = await handle.createWritable();
        try {
          await writable.write(frame as Uint8Array<ArrayBuffer>);
          await writable.close();
        } catch (error) {
          await writable.abort().catch(() => undefined);
          throw error;
        }
        this.#index.insert(key, frame.byteLength);
        this.#counters.puts++;
        this.#counters.bytesWritten += frame.byteLength;
        stored++;
      } catch {
        this.#counters.errors++;
      } finally {
        this.#index.release(frame.byteLength);
      }
    }
    return stored;
  }

  async getMany(keys: readonly BlockHash[]): Promise<(Uint8Array | undefined)[]> {
    checkOpen(this.#closed, this.tier);
    checkKeys(keys);
    const out: (Uint8Array | undefined)[] = [];
    for (const key of keys) out.push(await this.#read(key));
    return out;
  }

  async #read(key: BlockHash): Promise<Uint8Array | undefined> {
    let bytes: Uint8Array;
    try {
      const handle = await this.#dir.getFileHandle(`${key}.kvb`);
      bytes = new Uint8Array(await (await handle.getFile()).arrayBuffer());
    } catch (error) {
      if (notFound(error)) {
        this.#index.remove(key);
        this.#counters.misses++;
      } else this.#counters.errors++;
      return undefined;
    }
    const decoded = decodeFrame(bytes, this.namespace, key);
    if (!decoded.ok) {
      this.#counters[decoded.fault === 'foreign' ? 'foreign' : 'corrupt']++;
      this.#counters.misses++;
      await this.#remove([key]);
      return undefined;
    }
    this.#counters.hits++;
    this.#counters.bytesRead += bytes.byteLength;
    if (this.#index.has(key)) this.#index.touch(key);
    else {
      // Written by another tab since this one opened.
      this.#index.insert(key, bytes.byteLength);
      await this.#evict(0);
    }
    return decoded.payload;
  }

  async has(key: BlockHash): Promise<boolean> {
    return (await this.countPrefix([key])) === 1;
  }

  async countPrefix(keys: readonly BlockHash[]): Promise<number> {
    checkOpen(this.#closed, this.tier);
    checkKeys(keys);
    let n = 0;
    for (const key of keys) {
      if (!(await this.#exists(key))) break;
      n++;
    }
    return n;
  }

  async #exists(key: BlockHash): Promise<boolean> {
    try {
      await this.#dir.getFileHandle(`${key}.kvb`);
      return true;
    } catch {
      this.#index.remove(key);
      return false;
    }
  }

  async delete(keys: readonly BlockHash[]): Promise<number> {
    checkOpen(this.#closed, this.tier);
    checkKeys(keys);
    return this.#remove(keys, 'deletes');
  }

  /** Removes files (and their index entries); returns how many existed. */
  async #remove(keys: readonly BlockHash[], count?: 'deletes' | 'evictions'): Promise<number> {
    let removed = 0;
    for (const key of keys) {
      this.#index.remove(key);
      try {
        await this.#dir.removeEntry(`${key}.kvb`);
        removed++;
        if (count) this.#counters[count]++;
      } catch (error) {
        if (!notFound(error)) this.#counters.errors++;
      }
    }
    return removed;
  }

  /** Evicts until `bytes` more would fit. */
  async #evict(bytes: number): Promise<void> {
    const victims = this.#index.reserve(bytes);
    if (victims === undefined) return;
    this.#index.release(bytes);
    await this.#remove(victims, 'evictions');
  }

  stats(): OffloadStats {
    return this.#counters.snapshot(
      this.tier,
      this.#index.size,
      this.#index.usedBytes,
      this.#index.maxBytes,
    );
  }

  /** Waits for the writes in flight, then refuses further calls. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await Promise.allSettled([...this.#writes]);
  }
}
