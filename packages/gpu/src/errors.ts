import { KvasirError } from '@kvasir/errors';

/** Stable reasons a {@link GpuError} is thrown. */
export type GpuErrorCode =
  /** No WebGPU adapter could be obtained (no driver, no software rasterizer, unsupported platform). */
  | 'NO_ADAPTER'
  /** `createGpu` options are malformed (unknown backend, bad limit name). */
  | 'INVALID_OPTIONS'
  /** The adapter refused to create a device with the requested limits or features. */
  | 'DEVICE_REQUEST_FAILED'
  /** WGSL failed to compile; `message` carries the compiler's messages with line numbers. */
  | 'SHADER_COMPILE'
  /** A compute pipeline could not be created from a module that compiled. */
  | 'PIPELINE'
  /** A WebGPU validation error was raised inside an error scope. */
  | 'VALIDATION'
  /** The device ran out of memory inside an error scope. */
  | 'OUT_OF_MEMORY'
  /** An internal WebGPU error was raised inside an error scope. */
  | 'INTERNAL'
  /** The device was lost (driver reset, `destroy()`); the `Gpu` can no longer be used. */
  | 'DEVICE_LOST'
  /** A method was called on a `Gpu` after `destroy()`. */
  | 'DESTROYED'
  /** A helper got an argument it cannot use (misaligned offset, size too large, ...). */
  | 'INVALID_ARGUMENT'
  /** Mapping a read-back buffer failed. */
  | 'MAP_FAILED';

/**
 * The error every `@kvasir/gpu` function throws. Match on `code`, never on `message`.
 *
 * @example
 * ```ts
 * try { await gpu.pipeline({ code }); }
 * catch (e) { if (GpuError.isInstance(e) && e.code === 'SHADER_COMPILE') console.error(e.message); }
 * ```
 */
export class GpuError extends KvasirError<GpuErrorCode> {}
