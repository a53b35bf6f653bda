// What `Gpu.createBuffer` and `Gpu.upload` check and compute before they touch the device.
import { BufferUsage } from './constants.js';
import { GpuError } from './errors.js';
import { asBytes } from './gpu-helpers.js';
import type { BufferKind, BufferOptions } from './gpu-types.js';

const KIND_USAGE: Record<BufferKind, number> = {
  storage: BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST,
  uniform: BufferUsage.UNIFORM | BufferUsage.COPY_DST,
  readback: BufferUsage.MAP_READ | BufferUsage.COPY_DST,
  upload: BufferUsage.MAP_WRITE | BufferUsage.COPY_SRC,
};

/** A buffer to create, checked: its descriptor and the bytes to put in it. */
export interface BufferPlan {
  readonly desc: GPUBufferDescriptor;
  readonly data: Uint8Array | undefined;
  /** MAP_READ or MAP_WRITE: data not written at creation is the caller's to map. */
  readonly mappable: boolean;
}

/**
 * The descriptor of a buffer for `options`, its size rounded up to a multiple of 4.
 * @throws {GpuError} `INVALID_ARGUMENT` for a size beyond `maxBufferSize`, data larger than the
 *   size, or neither size nor data.
 */
export function planBuffer(options: BufferOptions, maxBufferSize: number): BufferPlan {
  const data = options.data === undefined ? undefined : asBytes(options.data);
  const requested = options.size ?? data?.byteLength;
  if (requested === undefined || !Number.isFinite(requested) || requested < 0) {
    throw new GpuError('INVALID_ARGUMENT', 'createBuffer needs a non-negative size or data.');
  }
  if (data !== undefined && data.byteLength > requested) {
    throw new GpuError(
      'INVALID_ARGUMENT',
      `createBuffer: data of ${data.byteLength} bytes does not fit size ${requested}.`,
    );
  }
  const size = Math.max(4, Math.ceil(requested / 4) * 4);
  if (size > maxBufferSize) {
    throw new GpuError(
      'INVALID_ARGUMENT',
      `Buffer '${options.label ?? ''}' of ${size} bytes exceeds maxBufferSize ${maxBufferSize}.`,
      { details: { size, maxBufferSize } },
    );
  }
  const kind = options.usage ?? 'storage';
  const usage = typeof kind === 'number' ? kind : KIND_USAGE[kind];
  const desc: GPUBufferDescriptor = {
    size,
    usage,
    // Mapped creation avoids a queue write, but a MAP_READ buffer cannot be written that way.
    mappedAtCreation: data !== undefined && (usage & BufferUsage.MAP_READ) === 0,
  };
  if (options.label !== undefined) desc.label = options.label;
  const mappable = (usage & (BufferUsage.MAP_READ | BufferUsage.MAP_WRITE)) !== 0;
  return { desc, data, mappable };
}

/**
 * The bytes `Gpu.upload` writes: `data` padded with zeros to a multiple of 4 bytes.
 * @throws {GpuError} `INVALID_ARGUMENT` for an offset that is not a multiple of 4 or a write
 *   past the end of the buffer.
 */
export function uploadBytes(
  buffer: GPUBuffer,
  data: ArrayBufferView | ArrayBuffer,
  byteOffset: number,
): Uint8Array {
  if (byteOffset % 4 !== 0) {
    throw new GpuError('INVALID_ARGUMENT', `upload offset ${byteOffset} is not a multiple of 4.`);
  }
  let bytes = asBytes(data);
  if (bytes.byteLength % 4 !== 0) {
    const padded = new Uint8Array(Math.ceil(bytes.byteLength / 4) * 4);
    padded.set(bytes);
    bytes = padded;
  }
  if (byteOffset + bytes.byteLength > buffer.size) {
    throw new GpuError(
      'INVALID_ARGUMENT',
      `upload of ${bytes.byteLength} bytes at ${byteOffset} overruns buffer '${buffer.label}' of ${buffer.size} bytes.`,
    );
  }
  return bytes;
}
