import { BufferUsage, MapMode } from './constants.js';
import { GpuError } from './errors.js';

/** Read-back buffers kept for reuse: enough for the few reads in flight of a decode step. */
const POOLED = 4;

/**
 * Copies GPU buffers back to the host through MAP_READ staging buffers, pooled because
 * read-backs happen every decode step (the sampled logits).
 */
export class Readback {
  readonly #device: GPUDevice;
  readonly #maxBufferSize: number;
  readonly #withErrorScope: (fn: () => void) => Promise<void>;
  readonly #staging: GPUBuffer[] = [];
  #destroyed = false;

  /** `withErrorScope` turns WebGPU errors of the copy into a thrown `GpuError`. */
  constructor(
    device: GPUDevice,
    maxBufferSize: number,
    withErrorScope: (fn: () => void) => Promise<void>,
  ) {
    this.#device = device;
    this.#maxBufferSize = maxBufferSize;
    this.#withErrorScope = withErrorScope;
  }

  /**
   * `size` bytes of `buffer` from `offset` (waits for all work submitted before it).
   * @throws {GpuError} `INVALID_ARGUMENT` for a range outside the buffer or a buffer without
   *   COPY_SRC; `MAP_FAILED` when mapping fails; `VALIDATION` for other WebGPU errors.
   */
  async read(buffer: GPUBuffer, offset = 0, size?: number): Promise<ArrayBuffer> {
    const length = size ?? buffer.size - offset;
    if (offset < 0 || length < 0 || offset + length > buffer.size) {
      throw new GpuError(
        'INVALID_ARGUMENT',
        `readBuffer range [${offset}, ${offset + length}) is outside buffer '${buffer.label}' of ${buffer.size} bytes.`,
      );
    }
    if ((buffer.usage & BufferUsage.COPY_SRC) === 0) {
      throw new GpuError(
        'INVALID_ARGUMENT',
        `readBuffer: buffer '${buffer.label}' lacks COPY_SRC usage.`,
      );
    }
    if (length === 0) return new ArrayBuffer(0);
    // Copies must start and end on 4-byte boundaries; widen, then slice.
    const start = Math.floor(offset / 4) * 4;
    const end = Math.min(buffer.size, Math.ceil((offset + length) / 4) * 4);
    const span = end - start;
    const staging = this.#take(span);
    let reusable = false;
    try {
      await this.#withErrorScope(() => {
        const encoder = this.#device.createCommandEncoder({ label: 'kvasir-readback' });
        encoder.copyBufferToBuffer(buffer, start, staging, 0, span);
        this.#device.queue.submit([encoder.finish()]);
      });
      try {
        await staging.mapAsync(MapMode.READ, 0, span);
      } catch (cause) {
        throw new GpuError('MAP_FAILED', `Mapping the read-back buffer failed: ${String(cause)}`, {
          cause,
        });
      }
      const out = staging.getMappedRange(0, span).slice(offset - start, offset - start + length);
      staging.unmap();
      reusable = true;
      return out;
    } finally {
      if (reusable && !this.#destroyed && this.#staging.length < POOLED)
        this.#staging.push(staging);
      else staging.destroy();
    }
  }

  /** Destroys the pooled buffers; a read still in flight destroys its own when done. */
  destroy(): void {
    this.#destroyed = true;
    for (const b of this.#staging) b.destroy();
    this.#staging.length = 0;
  }

  /**
   * A MAP_READ buffer of at least `size` bytes: a pooled one when free, else a new one rounded
   * up to a power of two. Taken out of the pool while in use, so concurrent read-backs never
   * share one.
   */
  #take(size: number): GPUBuffer {
    let best = -1;
    this.#staging.forEach((b, i) => {
      if (b.size >= size && (best < 0 || b.size < this.#staging[best]!.size)) best = i;
    });
    if (best >= 0) return this.#staging.splice(best, 1)[0]!;
    return this.#device.createBuffer({
      label: 'kvasir-readback',
      size: Math.max(
        size,
        Math.min(this.#maxBufferSize, Math.max(4096, 2 ** Math.ceil(Math.log2(size)))),
      ),
      usage: BufferUsage.MAP_READ | BufferUsage.COPY_DST,
    });
  }
}
