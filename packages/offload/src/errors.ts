import { KvasirError } from '@kvasir/errors';

/** Stable reasons an offload store refuses a call. Backend failures are never thrown: they are misses. */
export type OffloadErrorCode =
  /** A key is not a 32-character lowercase hex block hash, or a namespace is malformed. */
  | 'INVALID_KEY'
  /** A value is not a non-empty `Uint8Array`. */
  | 'INVALID_VALUE'
  /** A value is larger than the store accepts (its budget or `maxValueBytes`). */
  | 'VALUE_TOO_LARGE'
  /** A constructor option or namespace field is out of range. */
  | 'INVALID_OPTIONS'
  /** The store was closed. */
  | 'CLOSED'
  /**
   * A store cannot be opened at all: `DiskStore.open` on a directory that cannot be created, is
   * not a directory, or cannot be written. Only opening throws it; later failures are misses.
   */
  | 'UNAVAILABLE'
  /**
   * A checksum worker thread failed (it crashed, or could not start or be reached). Stores never
   * throw it: the block concerned is a miss (or not stored) and counted in `errors`.
   */
  | 'CHECKSUM_WORKER'
  /** A value given as a KV connector is not one (see `validateKvConnector`). */
  | 'INVALID_CONNECTOR'
  /**
   * The swap connector's store kept fewer swapped-out blocks than it was given: the step that
   * swapped them out fails, as they have no other copy.
   */
  | 'SWAP_LOST';

/**
 * Thrown by @kvasir/offload for misuse (bad keys, values or options, a closed store) and when a
 * store cannot be opened at all (`UNAVAILABLE`).
 * An unreachable Redis, a full disk or a corrupted entry is not misuse: those calls report
 * misses and count the failure in `stats()`, so a failing tier never stops the engine.
 */
export class OffloadError extends KvasirError<OffloadErrorCode> {}
