import { OffloadError } from './errors.js';
import { XXH64_DATA, xxh64InPlace, xxh64StagingBuffers } from './xxh64.js';

/** Staging buffers start on 4 KiB boundaries (a page: what the kernel's copies like best). */
const STAGING_ALIGN = 4096;
/** WebAssembly memory (32-bit addresses) holds at most 4 GiB, of which the first 64 KiB is not data. */
const STAGING_MAX_BYTES = 2 ** 32 - XXH64_DATA;

/**
 * `count` host buffers of `bytes` each for staging KV blocks between the GPU and the stores: a
 * swap-out's read-back target that `putMany` then takes, or `getManyInto`'s targets before an
 * upload. Their checksum (XXH64, which every disk and Redis read and write computes) runs on
 * them where they lie, where an ordinary buffer is first copied into the checksum's
 * WebAssembly memory: that copy is half the cost of a checksum pass, and the one extra pass
 * over the bytes that the stores add to a plain file read or write. The buffers are ordinary
 * `Uint8Array`s in every other way; reuse them from step to step (the stores never keep a
 * reference to a value passed to `putMany`). They share one memory, which lives while any of
 * them is referenced, and cannot be transferred to another thread.
 * @throws {OffloadError} INVALID_OPTIONS when `count` or `bytes` is not a positive integer, or
 *   the buffers (each rounded up to 4 KiB) would exceed 4 GiB in all.
 */
export function stagingBuffers(count: number, bytes: number): Uint8Array[] {
  for (const [name, v] of [
    ['count', count],
    ['bytes', bytes],
  ] as const) {
    if (!Number.isSafeInteger(v) || v <= 0) {
      throw new OffloadError(
        'INVALID_OPTIONS',
        `stagingBuffers: ${name} must be a positive integer, got ${String(v)}`,
        { details: { [name]: v } },
      );
    }
  }
  const stride = Math.ceil(bytes / STAGING_ALIGN) * STAGING_ALIGN;
  if (count * stride > STAGING_MAX_BYTES) {
    throw new OffloadError(
      'INVALID_OPTIONS',
      `stagingBuffers: ${count} × ${bytes} bytes (${count * stride} with 4 KiB alignment) exceeds the ${STAGING_MAX_BYTES} bytes one WebAssembly memory can hold; allocate fewer or smaller buffers per call`,
      { details: { count, bytes, maxBytes: STAGING_MAX_BYTES } },
    );
  }
  try {
    return xxh64StagingBuffers(count, bytes, stride);
  } catch (e) {
    throw new OffloadError(
      'INVALID_OPTIONS',
      `stagingBuffers: could not allocate ${count} × ${bytes} bytes: ${(e as Error).message}`,
      { cause: e, details: { count, bytes } },
    );
  }
}

/** Whether `data` lies in staging memory, so that its checksum reads it in place. */
export function isStagingBuffer(data: Uint8Array): boolean {
  return xxh64InPlace(data) !== undefined;
}
