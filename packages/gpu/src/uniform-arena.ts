import { BufferUsage } from './constants.js';
import { GpuError } from './errors.js';

/**
 * Hands out small, distinct uniform-buffer regions for per-dispatch parameters.
 *
 * Many dispatches with different parameters can be encoded into ONE submission: each
 * {@link UniformArena.alloc} writes its bytes into a fresh region (through `queue.writeBuffer`,
 * which lands before the submission runs), so no dispatch sees another's values. Overwriting one
 * buffer per dispatch would not work: every write would land before the whole submission ran.
 *
 * Regions are recycled by {@link UniformArena.reset}, which is safe right after
 * `queue.submit()` because queue writes issued later are ordered after that submission.
 * `Gpu.submit()` and `Gpu.run()` reset the arena of their `Gpu` for you.
 */
export class UniformArena {
  readonly #device: GPUDevice;
  readonly #chunkSize: number;
  readonly #alignment: number;
  readonly #chunks: GPUBuffer[] = [];
  #chunk = 0;
  #offset = 0;

  /**
   * @param device the device that owns the buffers.
   * @param alignment region alignment (the device's `minUniformBufferOffsetAlignment`).
   * @param chunkSize bytes per backing buffer (at most `maxUniformBufferBindingSize`).
   */
  constructor(device: GPUDevice, alignment: number, chunkSize = 65536) {
    this.#device = device;
    this.#alignment = Math.max(16, alignment);
    this.#chunkSize = chunkSize;
  }

  /**
   * Copy `data` into a new region and return a binding for it (size rounded up to 16 bytes,
   * as WGSL uniform structs are).
   *
   * @throws {GpuError} `INVALID_ARGUMENT` when `data` is larger than one chunk.
   */
  alloc(data: ArrayBufferView | ArrayBuffer): GPUBufferBinding {
    const bytes =
      data instanceof ArrayBuffer
        ? new Uint8Array(data)
        : new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    const size = Math.max(16, Math.ceil(bytes.byteLength / 16) * 16);
    if (size > this.#chunkSize) {
      throw new GpuError(
        'INVALID_ARGUMENT',
        `Uniform parameters of ${bytes.byteLength} bytes exceed the arena chunk of ${this.#chunkSize} bytes; use a storage buffer.`,
      );
    }
    if (this.#offset + size > this.#chunkSize) {
      this.#chunk++;
      this.#offset = 0;
    }
    let buffer = this.#chunks[this.#chunk];
    if (buffer === undefined) {
      buffer = this.#device.createBuffer({
        label: `kvasir-uniform-arena-${this.#chunk}`,
        size: this.#chunkSize,
        usage: BufferUsage.UNIFORM | BufferUsage.COPY_DST,
      });
      this.#chunks.push(buffer);
    }
    const offset = this.#offset;
    const padded = new Uint8Array(size);
    padded.set(bytes);
    this.#device.queue.writeBuffer(buffer, offset, padded);
    this.#offset = Math.ceil((offset + size) / this.#alignment) * this.#alignment;
    return { buffer, offset, size };
  }

  /**
   * Make every region reusable. Call only after the submission(s) that use the regions handed
   * out so far have been passed to `queue.submit()`, and with no encoder still being recorded
   * that holds a region.
   */
  reset(): void {
    this.#chunk = 0;
    this.#offset = 0;
  }

  /** Number of backing buffers allocated so far. */
  get chunkCount(): number {
    return this.#chunks.length;
  }

  /** Destroy the backing buffers. */
  destroy(): void {
    for (const b of this.#chunks) b.destroy();
    this.#chunks.length = 0;
    this.reset();
  }
}
