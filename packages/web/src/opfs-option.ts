// The page's `opfs` option and the worker's report on the tier (no storage code: the page's
// bundle carries this file only).
import { WebEngineError } from './errors.js';

/** Default bytes of the OPFS KV tier. */
export const DEFAULT_OPFS_BYTES = 256 * 1024 * 1024;

/** The OPFS KV tier of an engine: on or off, and why. */
export interface KvTierReport {
  /** True when prefix blocks are written to, and read back from, the OPFS tier. */
  readonly opfs: boolean;
  /** Bytes the tier may take for this model (0 when off). */
  readonly maxBytes: number;
  readonly reason: string;
}

/** What the page asked for: `false`, or the tier's budget. */
export type OpfsOption = false | { readonly maxBytes: number };

/**
 * The page's `opfs` option as the worker takes it.
 * @throws {WebEngineError} `INVALID_REQUEST` naming `opfs` or `opfs.maxBytes`.
 */
export function opfsOption(value: unknown): OpfsOption {
  if (value === undefined || value === false) return false;
  if (value === true) return { maxBytes: DEFAULT_OPFS_BYTES };
  if (typeof value === 'object' && value !== null) {
    const maxBytes = (value as { maxBytes?: unknown }).maxBytes ?? DEFAULT_OPFS_BYTES;
    if (typeof maxBytes === 'number' && Number.isSafeInteger(maxBytes) && maxBytes > 0) {
      return { maxBytes };
    }
    throw new WebEngineError(
      'INVALID_REQUEST',
      `opfs.maxBytes must be a positive integer number of bytes, got ${String(maxBytes)}`,
      { details: { param: 'opfs.maxBytes' } },
    );
  }
  throw new WebEngineError(
    'INVALID_REQUEST',
    `opfs must be true, false or { maxBytes }, got ${String(value)}`,
    { details: { param: 'opfs' } },
  );
}
