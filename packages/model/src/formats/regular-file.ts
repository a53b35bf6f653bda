import { readFile, stat } from 'node:fs/promises';
import { ModelError } from '../errors.js';

function kindOf(s: Awaited<ReturnType<typeof stat>>): string {
  if (s.isDirectory()) return 'a directory';
  if (s.isFIFO()) return 'a FIFO';
  if (s.isCharacterDevice()) return 'a character device';
  if (s.isBlockDevice()) return 'a block device';
  if (s.isSocket()) return 'a socket';
  return 'not a regular file';
}

/**
 * Checks that `path` is a regular file before anything opens or reads it. Opening a FIFO
 * blocks until a writer appears (forever, for a model path), a character device such as
 * `/dev/zero` never ends, and a directory opens and fails only at its first read.
 *
 * @param what - what the file is, for the message (`checkpoint`, `tokenizer file`).
 * @throws {@link ModelError} `IO` when `path` does not exist or is not a regular file, naming
 *   what it is instead (`details.missing` is true when it does not exist).
 */
export async function checkRegularFile(path: string, what: string): Promise<void> {
  let s: Awaited<ReturnType<typeof stat>>;
  try {
    s = await stat(path);
  } catch (e) {
    throw new ModelError('IO', `${what} ${path} cannot be read: ${(e as Error).message}`, {
      cause: e,
      details: { file: path, missing: (e as { code?: unknown }).code === 'ENOENT' },
    });
  }
  if (!s.isFile()) {
    throw new ModelError(
      'IO',
      `${what} ${path} is ${kindOf(s)}, not a regular file; give the path of the file itself`,
      { details: { file: path, missing: false } },
    );
  }
}

/**
 * Reads a regular file as UTF-8 text, after {@link checkRegularFile}.
 *
 * @throws {@link ModelError} `IO` as {@link checkRegularFile}, or when the read fails.
 */
export async function readRegularTextFile(path: string, what: string): Promise<string> {
  await checkRegularFile(path, what);
  try {
    return await readFile(path, 'utf8');
  } catch (e) {
    throw new ModelError('IO', `cannot read ${what} ${path}: ${(e as Error).message}`, {
      cause: e,
      details: { file: path, missing: false },
    });
  }
}

/** Whether `e` is the {@link checkRegularFile} error of a path that does not exist. */
export function isMissingFileError(e: unknown): boolean {
  return ModelError.isInstance(e) && e.code === 'IO' && e.details?.missing === true;
}
