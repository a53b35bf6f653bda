// File-system helpers of the disk store: whole reads and writes past short transfers, a
// `mkdir -p` that always settles, and file-system errors in words.
import type { FileHandle } from 'node:fs/promises';
import { mkdir, stat } from 'node:fs/promises';
import { dirname } from 'node:path';

/** The `code` of a Node.js system error. */
export function errno(e: unknown): string | undefined {
  return typeof e === 'object' && e !== null ? (e as NodeJS.ErrnoException).code : undefined;
}

/** Reads the file from offset 0 into `header` then `payload`; returns the bytes read (less at EOF). */
export async function readFully(fh: FileHandle, header: Buffer, payload: Buffer): Promise<number> {
  const total = header.byteLength + payload.byteLength;
  let { bytesRead } = await fh.readv([header, payload], 0);
  // readv may stop short; finish with positional reads.
  while (bytesRead > 0 && bytesRead < total) {
    const inHeader = bytesRead < header.byteLength;
    const dst = inHeader ? header : payload;
    const from = inHeader ? bytesRead : bytesRead - header.byteLength;
    const r = await fh.read(dst, from, dst.byteLength - from, bytesRead);
    if (r.bytesRead === 0) break;
    bytesRead += r.bytesRead;
  }
  return bytesRead;
}

/** Writes header then payload from offset 0, finishing a short `writev`. */
export async function writeFully(
  fh: FileHandle,
  header: Uint8Array,
  payload: Uint8Array,
): Promise<void> {
  const total = header.byteLength + payload.byteLength;
  let { bytesWritten } = await fh.writev([header, payload], 0);
  // writev may stop short (signals, quotas); finish with positional writes.
  while (bytesWritten < total) {
    const inHeader = bytesWritten < header.byteLength;
    const src = inHeader ? header : payload;
    const from = inHeader ? bytesWritten : bytesWritten - header.byteLength;
    const r = await fh.write(src, from, src.byteLength - from, bytesWritten);
    if (r.bytesWritten === 0) throw new Error('short write');
    bytesWritten += r.bytesWritten;
  }
}

/**
 * `mkdir -p` that always settles. Node's own `mkdir(path, { recursive: true })` never does where
 * the kernel answers ENOENT under an existing parent (as in `/proc`): it retries the same pair of
 * calls for ever. Here each level is tried at most twice.
 */
export async function makeDirectory(path: string): Promise<void> {
  try {
    await mkdir(path);
    return;
  } catch (e) {
    const code = errno(e);
    if (code === 'EEXIST') return checkDirectory(path, e);
    const parent = dirname(path);
    if (code !== 'ENOENT' || parent === path) throw e;
  }
  await makeDirectory(dirname(path));
  try {
    await mkdir(path);
  } catch (e) {
    if (errno(e) !== 'EEXIST') throw e;
    await checkDirectory(path, e);
  }
}

async function checkDirectory(path: string, error: unknown): Promise<void> {
  if (!(await stat(path)).isDirectory()) {
    throw Object.assign(new Error(`${path} exists and is not a directory`), {
      code: 'ENOTDIR',
      cause: error,
    });
  }
}

const FS_REASONS: Readonly<Record<string, string>> = {
  ENOTDIR: 'a component of the path is a file, not a directory',
  ENOENT: 'it cannot be created there',
  EACCES: 'permission denied',
  EPERM: 'operation not permitted',
  EROFS: 'read-only file system',
  ENOSPC: 'no space left on the device',
  ELOOP: 'too many symbolic links',
  ENAMETOOLONG: 'the path is too long',
};

/** A file-system error in words, for messages that name the fix. */
export function describeFsError(e: unknown): string {
  const code = errno(e);
  const reason = code === undefined ? undefined : FS_REASONS[code];
  if (reason !== undefined) return `${reason} (${code})`;
  return e instanceof Error ? e.message : String(e);
}

/** Writes `header` at offset 0 (over a blank one). */
export async function writeHeader(fh: FileHandle, header: Uint8Array): Promise<void> {
  for (let at = 0; at < header.byteLength; ) {
    const r = await fh.write(header, at, header.byteLength - at, at);
    if (r.bytesWritten === 0) throw new Error('short write');
    at += r.bytesWritten;
  }
}
