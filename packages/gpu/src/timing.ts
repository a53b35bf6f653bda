import { BufferUsage } from './constants.js';
import type { Gpu } from './gpu.js';
import type { GpuTiming } from './gpu-types.js';

/** What a {@link GpuTimer} uses of its `Gpu`. */
type TimedGpu = Pick<
  Gpu,
  | 'device'
  | 'hasTimestamps'
  | 'createBuffer'
  | 'run'
  | 'readBuffer'
  | 'idle'
  | 'submit'
  | 'withErrorScope'
>;

/**
 * Times GPU work for `Gpu.time`: with timestamp queries around it when the device has
 * `timestamp-query` (the query set is made on first use), otherwise host time from submit to
 * completion.
 */
export class GpuTimer {
  readonly #gpu: TimedGpu;
  #timestamp: { querySet: GPUQuerySet; resolve: GPUBuffer } | undefined;

  constructor(gpu: TimedGpu) {
    this.#gpu = gpu;
  }

  /** The time of the work `fn` encodes (see `Gpu.time`). */
  async time(fn: (encoder: GPUCommandEncoder) => void): Promise<GpuTiming> {
    const gpu = this.#gpu;
    if (!gpu.hasTimestamps) {
      const encoder = gpu.device.createCommandEncoder({ label: 'kvasir-time' });
      fn(encoder);
      const commands = encoder.finish();
      await gpu.idle();
      const t0 = performance.now();
      await gpu.withErrorScope(() => gpu.submit(commands));
      await gpu.device.queue.onSubmittedWorkDone();
      return { ms: performance.now() - t0, source: 'wall-clock' };
    }
    if (this.#timestamp === undefined) {
      this.#timestamp = {
        querySet: gpu.device.createQuerySet({ type: 'timestamp', count: 2 }),
        resolve: gpu.createBuffer({
          size: 16,
          usage: BufferUsage.QUERY_RESOLVE | BufferUsage.COPY_SRC,
          label: 'kvasir-timestamps',
        }),
      };
    }
    const { querySet, resolve } = this.#timestamp;
    await gpu.run((encoder) => {
      encoder
        .beginComputePass({ timestampWrites: { querySet, beginningOfPassWriteIndex: 0 } })
        .end();
      fn(encoder);
      encoder.beginComputePass({ timestampWrites: { querySet, endOfPassWriteIndex: 1 } }).end();
      encoder.resolveQuerySet(querySet, 0, 2, resolve, 0);
    });
    const stamps = new BigUint64Array(await gpu.readBuffer(resolve));
    const ns = Number((stamps[1] ?? 0n) - (stamps[0] ?? 0n));
    return { ms: Math.max(0, ns) / 1e6, source: 'timestamp' };
  }

  /** Destroys the query set (its resolve buffer is the `Gpu`'s to destroy). */
  destroy(): void {
    this.#timestamp?.querySet.destroy();
    this.#timestamp = undefined;
  }
}
