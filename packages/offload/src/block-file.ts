// One KV block as a file of the disk store: where it lives, how it is written (a frame: header
// with namespace, key, length and XXH64, then the payload) and read back verified, and how a
// store's directory is scanned for them.
import { randomBytes } from 'node:crypto';
import type { FileHandle } from 'node:fs/promises';
import { open, readdir, rename, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import type { BlockHash } from '@kvasir/kv-allocator';
import type { Checksummer } from './checksum-pool.js';
import { errno, readFully, writeFully, writeHeader } from './disk-files.js';
import {
  checkFrameHeader,
  encodeFrameHeader,
  FRAME_HEADER_BYTES,
  type FrameFault,
  payloadLengthFault,
  payloadMatches,
} from './frame.js';

const BLOCK_FILE = /^([0-9a-f]{32})\.kvb$/;
const TEMP_FILE = /\.tmp$/;

// Stands in for the header while a worker hashes the payload from the file (never renamed into
// place like this: the real header is written over it first).
const BLANK_HEADER = new Uint8Array(FRAME_HEADER_BYTES);

/** The directory of a block's file under a namespace directory (its hash's first two digits). */
export function blockFileDir(nsDir: string, key: BlockHash): string {
  return join(nsDir, key.slice(0, 2));
}

/** The path of a block's file: `<nsDir>/<first two hex>/<hash>.kvb`. */
export function blockFilePath(nsDir: string, key: BlockHash): string {
  return join(blockFileDir(nsDir, key), `${key}.kvb`);
}

/** What {@link writeBlockFile} writes, and how. */
export interface BlockFileWrite {
  readonly namespace: string;
  readonly key: BlockHash;
  readonly value: Uint8Array;
  readonly checksum: Checksummer;
  /** Sync the file before it is renamed into place. */
  readonly fsync: boolean;
  /** Makes the file's directory again, once, when it was removed under the writer. */
  readonly recreateDir: () => Promise<void>;
}

/**
 * Writes a block's frame to a unique temporary file beside `path` and renames it into place, so
 * readers see the old file, the new one or nothing, never part of one. On failure the
 * temporary file is removed and the error rethrown.
 */
export async function writeBlockFile(path: string, write: BlockFileWrite): Promise<void> {
  const tmp = `${path}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
  try {
    let fh: FileHandle;
    try {
      fh = await open(tmp, 'wx+'); // readable too: a checksum worker reads it back
    } catch (e) {
      if (errno(e) !== 'ENOENT') throw e;
      await write.recreateDir();
      fh = await open(tmp, 'wx+');
    }
    try {
      await writeBlockFrame(fh, write);
    } finally {
      await fh.close();
    }
    await rename(tmp, path);
  } catch (error) {
    await unlink(tmp).catch(() => undefined);
    throw error;
  }
}

/**
 * Writes a block's frame into the open file `fh`: header then payload, its checksum computed
 * inline or by a checksum worker from the file, synced when asked.
 */
async function writeBlockFrame(fh: FileHandle, write: BlockFileWrite): Promise<void> {
  const { namespace, key, value, checksum } = write;
  if (checksum.offloads(value.byteLength)) {
    // The payload goes first, behind a blank header; a worker hashes it from the file (the
    // page cache) and the real header is written over the blank one before the rename.
    // This thread copies nothing and hashes nothing.
    await writeFully(fh, BLANK_HEADER, value);
    const sum = await checksum.ofFile(fh.fd, FRAME_HEADER_BYTES, value);
    if (sum === undefined) throw new Error('the temporary file is shorter than was written');
    await writeHeader(fh, encodeFrameHeader(namespace, key, value, sum));
  } else {
    // Inline, checksummed right before it is written, so the kernel copies bytes still in cache.
    await writeFully(fh, encodeFrameHeader(namespace, key, value), value);
  }
  if (write.fsync) await fh.sync();
}

/** Deletes `path` if it is still the file `ino` (another process may have replaced it). */
export async function unlinkIfSame(path: string, ino: number): Promise<void> {
  try {
    const st = await stat(path);
    // Another process may have renamed a good file over the bad one since we read it.
    if (st.ino === ino) await unlink(path);
  } catch {
    // already gone
  }
}

/** The block files of a namespace directory, and the subdirectories that hold them. */
export interface BlockFileScan {
  /** Oldest first (by modification time). */
  readonly files: readonly { readonly key: BlockHash; readonly size: number }[];
  readonly dirs: readonly string[];
}

/**
 * Lists the block files under `nsDir`, oldest first, and deletes temporary files older than
 * `staleTempMs` (writes that died before their rename). Entries that vanish meanwhile (another
 * process) are skipped.
 */
export async function scanBlockFiles(nsDir: string, staleTempMs: number): Promise<BlockFileScan> {
  const found: { key: BlockHash; size: number; mtime: number }[] = [];
  const dirs: string[] = [];
  const now = Date.now();
  for (const sub of await readdir(nsDir, { withFileTypes: true })) {
    if (!sub.isDirectory() || !/^[0-9a-f]{2}$/.test(sub.name)) continue;
    const subDir = join(nsDir, sub.name);
    dirs.push(subDir);
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
  return { files: found, dirs };
}

/** What reading one block file found. */
export type BlockFileRead =
  /** No such file (`error`: it could not be opened for another reason). */
  | { readonly kind: 'missing'; readonly error: boolean }
  /** A block of another length than the caller's target: a miss, the file left alone. */
  | { readonly kind: 'other-length' }
  /** An I/O or checksum-worker failure: a miss, the file kept. */
  | { readonly kind: 'error' }
  /** A corrupt or foreign file; `ino` identifies it, to delete it only if still the same. */
  | { readonly kind: 'fault'; readonly fault: FrameFault; readonly ino: number }
  /** The block's payload, verified, and the bytes read (header included). */
  | { readonly kind: 'ok'; readonly payload: Uint8Array; readonly size: number };

/**
 * Reads and verifies the block file at `path`: its frame header names `namespace` and `key`,
 * and the payload matches the header's length and checksum. With `into`, the payload is read
 * into the caller's array (which must be the payload's exact length).
 */
export async function readBlockFile(
  path: string,
  namespace: string,
  key: BlockHash,
  checksum: Checksummer,
  into?: Uint8Array,
): Promise<BlockFileRead> {
  let fh: FileHandle;
  try {
    fh = await open(path, 'r');
  } catch (e) {
    return { kind: 'missing', error: errno(e) !== 'ENOENT' };
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
    if (into !== undefined && st.size - FRAME_HEADER_BYTES !== into.byteLength) {
      return { kind: 'other-length' };
    }
    // Header and payload in one readv, the payload into a buffer of exactly its own size (or
    // the caller's target): no copy, and the caller's array is the block and nothing else.
    const header = Buffer.allocUnsafe(Math.min(st.size, FRAME_HEADER_BYTES));
    payload =
      into === undefined
        ? Buffer.allocUnsafeSlow(Math.max(0, st.size - FRAME_HEADER_BYTES))
        : Buffer.from(into.buffer, into.byteOffset, into.byteLength);
    size = await readFully(fh, header, payload);
    // Verified at once, while the bytes just read are still in cache.
    const checked = checkFrameHeader(header.subarray(0, size), namespace, key);
    if (!checked.ok) fault = checked.fault;
    else {
      if (size < st.size) payload = payload.subarray(0, size - header.byteLength);
      fault = payloadLengthFault(payload, checked);
      if (fault === undefined) {
        promised = checked;
        const read = payload;
        // The payload buffer is this read's alone: on a worker it is moved there and back
        // (while the file is closed). The caller's target cannot move: a worker hashes the
        // same bytes from the file, which stays open (and, renamed into place whole, never
        // changes) until the digest is back. Inline both are hashed here and now.
        hashing =
          into === undefined
            ? checksum.ofOwned(payload)
            : checksum
                .ofFile(fh.fd, FRAME_HEADER_BYTES, payload)
                .then((sum) => ({ sum, data: read }));
        hashing.catch(() => undefined); // awaited below
        keepOpen = into !== undefined;
      }
    }
  } catch {
    return { kind: 'error' };
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
      return { kind: 'error' }; // a checksum worker failed
    } finally {
      if (keepOpen) await fh.close().catch(() => undefined);
    }
  }
  if (fault !== undefined) return { kind: 'fault', fault, ino };
  return { kind: 'ok', payload, size };
}
