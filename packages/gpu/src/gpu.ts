import { planBuffer, uploadBytes } from './buffers.js';
import { withErrorScope } from './error-scope.js';
import { GpuError } from './errors.js';
import { asBytes, bindGroupEntries, isBindGroup, normalizeWorkgroups } from './gpu-helpers.js';
import type {
  BufferOptions,
  GpuAdapterReport,
  GpuBackend,
  GpuBinding,
  GpuDeviceReport,
  GpuLimits,
  GpuTiming,
  PipelineDescriptor,
  Workgroups,
} from './gpu-types.js';
import { PipelineCache } from './pipeline-cache.js';
import { Readback } from './readback.js';
import { GpuTimer } from './timing.js';
import { UniformArena } from './uniform-arena.js';

/** `GPU` instances that made a device, never released: see the `Gpu` constructor. */
const liveInstances = new Set<unknown>();

/**
 * A WebGPU device and the helpers kernel packages share. Obtain one with `createGpu()`.
 *
 * Kernels record into a caller's `GPUCommandEncoder` with {@link Gpu.dispatch} (so a model can
 * encode a whole step into one submission), take per-dispatch parameters from
 * {@link Gpu.uniforms}, and compile through the cached {@link Gpu.pipeline}. Call
 * {@link Gpu.destroy} when done so Node can exit.
 */
export class Gpu implements GpuDeviceReport {
  /** The underlying device, for anything the helpers do not cover. */
  readonly device: GPUDevice;
  readonly adapterInfo: GpuAdapterReport;
  readonly backend: GpuBackend;
  readonly featureLevel: 'core' | 'compatibility';
  readonly isSoftware: boolean;
  readonly limits: GpuLimits;
  readonly features: ReadonlySet<string>;
  /** Per-dispatch uniform parameters; reset by {@link Gpu.submit} and {@link Gpu.run}. */
  readonly uniforms: UniformArena;
  /** The message of the last WebGPU error raised outside any error scope, if any. */
  lastUncapturedError: string | undefined;

  readonly #buffers = new Set<GPUBuffer>();
  readonly #readback: Readback;
  readonly #pipelineCache: PipelineCache;
  #destroyed = false;
  #lostMessage: string | undefined;
  readonly #timer = new GpuTimer(this);

  /**
   * Wrap an existing device. `createGpu()` is the usual way to get one.
   *
   * @param instance the `GPU` object the device came from. Dawn in Node aborts the process when
   *   an instance that made a device is garbage-collected, even after `device.destroy()` (at
   *   exit too), so it is held in a module-level set for the life of the process.
   */
  constructor(device: GPUDevice, report: GpuDeviceReport, instance?: unknown) {
    this.device = device;
    this.#pipelineCache = new PipelineCache(device, (fn) => this.withErrorScope(fn));
    this.#readback = new Readback(device, report.limits.maxBufferSize, (fn) =>
      this.withErrorScope(fn),
    );
    if (instance !== undefined) liveInstances.add(instance);
    this.adapterInfo = report.adapterInfo;
    this.backend = report.backend;
    this.featureLevel = report.featureLevel;
    this.isSoftware = report.isSoftware;
    this.limits = report.limits;
    this.features = report.features;
    this.uniforms = new UniformArena(
      device,
      report.limits.minUniformBufferOffsetAlignment ?? 256,
      Math.min(65536, report.limits.maxUniformBufferBindingSize ?? 65536),
    );
    device.lost.then((info) => {
      if (!this.#destroyed) this.#lostMessage = `${info.reason}: ${info.message}`;
    });
    device.onuncapturederror = (ev: GPUUncapturedErrorEvent) => {
      this.lastUncapturedError = ev.error.message;
    };
  }

  /** The device's queue. */
  get queue(): GPUQueue {
    return this.device.queue;
  }

  /** True when the device has timestamp queries, so {@link Gpu.time} measures on the GPU. */
  get hasTimestamps(): boolean {
    return this.features.has('timestamp-query');
  }

  /** True when WGSL may `enable f16;`. */
  get hasShaderF16(): boolean {
    return this.features.has('shader-f16');
  }

  /** Pipeline cache statistics (a hit returns a pipeline compiled earlier). */
  get pipelineStats(): { hits: number; misses: number; size: number } {
    return this.#pipelineCache.stats;
  }

  /** True after {@link Gpu.destroy}. */
  get destroyed(): boolean {
    return this.#destroyed;
  }

  /** One line naming the adapter, backend and feature level, for logs and benchmarks. */
  describe(): string {
    const a = this.adapterInfo;
    const name = [a.vendor, a.architecture, a.device].filter((s) => s !== '').join(' ');
    return `${name || 'unknown adapter'}${a.description ? ` (${a.description})` : ''} via ${this.backend}, ${this.featureLevel}${this.isSoftware ? ', software' : ''}`;
  }

  #alive(): void {
    if (this.#destroyed) throw new GpuError('DESTROYED', 'This Gpu has been destroyed.');
    if (this.#lostMessage !== undefined) {
      throw new GpuError('DEVICE_LOST', `The WebGPU device was lost (${this.#lostMessage}).`);
    }
  }

  /**
   * Create a buffer, tracked so {@link Gpu.destroy} releases it. Sizes are rounded up to a
   * multiple of 4 (WebGPU copies need it).
   *
   * @throws {GpuError} `INVALID_ARGUMENT` for a size beyond `maxBufferSize` or neither size nor
   *   data; `DESTROYED` / `DEVICE_LOST`.
   */
  createBuffer(options: BufferOptions): GPUBuffer {
    this.#alive();
    const { desc, data, mappable } = planBuffer(options, this.limits.maxBufferSize);
    const buffer = this.device.createBuffer(desc);
    if (data !== undefined && desc.mappedAtCreation) {
      new Uint8Array(buffer.getMappedRange()).set(data);
      buffer.unmap();
    } else if (data !== undefined && !mappable) {
      this.upload(buffer, data);
    }
    this.#buffers.add(buffer);
    return buffer;
  }

  /**
   * A storage buffer (also copyable both ways) holding `dataOrSize`'s bytes, or zeros.
   *
   * @throws {GpuError} as {@link Gpu.createBuffer}.
   */
  storageBuffer(dataOrSize: ArrayBufferView | ArrayBuffer | number, label?: string): GPUBuffer {
    const opts: BufferOptions =
      typeof dataOrSize === 'number' ? { size: dataOrSize } : { data: dataOrSize };
    if (label !== undefined) opts.label = label;
    return this.createBuffer(opts);
  }

  /**
   * A uniform buffer holding `data` (padded to 16 bytes). For parameters that change per
   * dispatch within one submission, use {@link Gpu.uniforms} instead.
   *
   * @throws {GpuError} as {@link Gpu.createBuffer}.
   */
  uniformBuffer(data: ArrayBufferView | ArrayBuffer, label?: string): GPUBuffer {
    const bytes = asBytes(data);
    const opts: BufferOptions = {
      size: Math.max(16, Math.ceil(bytes.byteLength / 16) * 16),
      data: bytes,
      usage: 'uniform',
    };
    if (label !== undefined) opts.label = label;
    return this.createBuffer(opts);
  }

  /**
   * Write a typed array into `buffer` at `byteOffset` through the queue. Data whose length is
   * not a multiple of 4 bytes is padded with zeros (WebGPU requires 4-byte multiples), so up to
   * 3 bytes after it are overwritten.
   *
   * @throws {GpuError} `INVALID_ARGUMENT` for an offset that is not a multiple of 4 or a write
   *   past the end of the buffer.
   */
  upload(buffer: GPUBuffer, data: ArrayBufferView | ArrayBuffer, byteOffset = 0): void {
    this.#alive();
    const bytes = uploadBytes(buffer, data, byteOffset);
    if (bytes.byteLength === 0) return;
    this.device.queue.writeBuffer(buffer, byteOffset, bytes, 0, bytes.byteLength);
  }

  /**
   * Copy `size` bytes of `buffer` from `offset` back to the host (waits for all work submitted
   * before it). The buffer needs `COPY_SRC` usage, which `storageBuffer` gives.
   *
   * @throws {GpuError} `INVALID_ARGUMENT` for a range outside the buffer or a buffer without
   *   COPY_SRC; `MAP_FAILED` when mapping fails; `VALIDATION` for other WebGPU errors.
   */
  async readBuffer(buffer: GPUBuffer, offset = 0, size?: number): Promise<ArrayBuffer> {
    this.#alive();
    return this.#readback.read(buffer, offset, size);
  }

  /** Destroy a buffer made by this `Gpu` now instead of at {@link Gpu.destroy}. */
  releaseBuffer(buffer: GPUBuffer): void {
    if (this.#buffers.delete(buffer)) buffer.destroy();
  }

  /**
   * A compute pipeline for `desc`, compiled once: later calls with the same source, entry point
   * and constants return the cached pipeline. The layout is `'auto'`, so bindings the shader
   * does not use are absent from it.
   *
   * @throws {GpuError} `SHADER_COMPILE` with the WGSL compiler's messages and source lines;
   *   `PIPELINE` when pipeline creation fails (bad entry point or constants).
   */
  pipeline(desc: PipelineDescriptor): Promise<GPUComputePipeline> {
    this.#alive();
    return this.#pipelineCache.get(desc);
  }

  /**
   * A bind group for `pipeline`'s group `group`, binding `bindings[i]` at `@binding(i)`. Pass an
   * object instead of an array to give explicit binding numbers (e.g. when the shader skips some).
   */
  bindGroup(
    pipeline: GPUComputePipeline,
    bindings: readonly GpuBinding[] | Readonly<Record<number, GpuBinding>>,
    group = 0,
  ): GPUBindGroup {
    this.#alive();
    const entries = bindGroupEntries(bindings);
    return this.device.createBindGroup({ layout: pipeline.getBindGroupLayout(group), entries });
  }

  /**
   * Record one compute dispatch into `encoder` (its own compute pass). `bindings` is a bind
   * group for group 0 or the buffers to bind at 0..n-1.
   */
  dispatch(
    encoder: GPUCommandEncoder,
    pipeline: GPUComputePipeline,
    bindings: GPUBindGroup | readonly GpuBinding[] | readonly GPUBindGroup[],
    workgroups: Workgroups,
    label?: string,
  ): void {
    this.#alive();
    const [x, y, z] = normalizeWorkgroups(workgroups);
    if (x === 0 || y === 0 || z === 0) return;
    const max = this.limits.maxComputeWorkgroupsPerDimension;
    if (x > max || y > max || z > max) {
      throw new GpuError(
        'INVALID_ARGUMENT',
        `dispatch of [${x}, ${y}, ${z}] workgroups exceeds ${max} per dimension; use splitWorkgroups().`,
      );
    }
    let groups: GPUBindGroup[];
    if (Array.isArray(bindings)) {
      const list = bindings as readonly (GpuBinding | GPUBindGroup)[];
      const areGroups = list.length > 0 && list.every((b) => isBindGroup(b));
      groups = areGroups
        ? (list as GPUBindGroup[])
        : [this.bindGroup(pipeline, list as readonly GpuBinding[])];
    } else {
      groups = [bindings as GPUBindGroup];
    }
    const pass = encoder.beginComputePass(label === undefined ? undefined : { label });
    pass.setPipeline(pipeline);
    groups.forEach((g, i) => {
      pass.setBindGroup(i, g);
    });
    pass.dispatchWorkgroups(x, y, z);
    pass.end();
  }

  /** A new command encoder. */
  createEncoder(label?: string): GPUCommandEncoder {
    this.#alive();
    return this.device.createCommandEncoder(label === undefined ? undefined : { label });
  }

  /**
   * Finish and submit encoders (or command buffers), then recycle {@link Gpu.uniforms}. Does not
   * wait; `await gpu.idle()` for that.
   */
  submit(
    work: GPUCommandEncoder | GPUCommandBuffer | readonly (GPUCommandEncoder | GPUCommandBuffer)[],
  ): void {
    this.#alive();
    const list = Array.isArray(work) ? work : [work];
    const buffers = list.map((w: GPUCommandEncoder | GPUCommandBuffer) =>
      'finish' in w ? w.finish() : w,
    );
    this.device.queue.submit(buffers);
    this.uniforms.reset();
  }

  /** Resolves when all work submitted so far has finished on the GPU. */
  async idle(): Promise<void> {
    this.#alive();
    await this.device.queue.onSubmittedWorkDone();
  }

  /**
   * Encode with `fn`, submit, and wait for completion, turning WebGPU errors raised meanwhile
   * into a thrown {@link GpuError}.
   *
   * @throws {GpuError} `VALIDATION`, `OUT_OF_MEMORY` or `INTERNAL`; whatever `fn` throws.
   */
  async run<T>(fn: (encoder: GPUCommandEncoder) => T | Promise<T>): Promise<T> {
    this.#alive();
    const result = await this.withErrorScope(async () => {
      const encoder = this.device.createCommandEncoder({ label: 'kvasir-run' });
      const r = await fn(encoder);
      this.submit(encoder);
      return r;
    });
    await this.device.queue.onSubmittedWorkDone();
    return result;
  }

  /**
   * One dispatch, submitted and awaited: `run(e => dispatch(e, pipeline, bindings, workgroups))`.
   *
   * @throws {GpuError} as {@link Gpu.run}.
   */
  runDispatch(
    pipeline: GPUComputePipeline,
    bindings: GPUBindGroup | readonly GpuBinding[],
    workgroups: Workgroups,
  ): Promise<void> {
    return this.run((encoder) => this.dispatch(encoder, pipeline, bindings, workgroups));
  }

  /**
   * Run `fn` inside validation, out-of-memory and internal error scopes and throw the first
   * error they caught. Scopes belong to the device: errors from other code running on the same
   * device concurrently land in the innermost open scope, so do not overlap scoped work.
   *
   * @throws {GpuError} `VALIDATION`, `OUT_OF_MEMORY` or `INTERNAL`; whatever `fn` throws.
   */
  async withErrorScope<T>(fn: () => T | Promise<T>): Promise<T> {
    this.#alive();
    return withErrorScope(this.device, fn);
  }

  /**
   * Time the GPU work `fn` encodes: with timestamp queries around it when the device has
   * `timestamp-query`, otherwise host time from submit to completion (labelled `'wall-clock'`).
   *
   * @throws {GpuError} as {@link Gpu.run}.
   */
  async time(fn: (encoder: GPUCommandEncoder) => void): Promise<GpuTiming> {
    this.#alive();
    return this.#timer.time(fn);
  }

  /**
   * Release every buffer, pipeline and query set this `Gpu` made, and the device, so Node can
   * exit. Idempotent.
   */
  destroy(): void {
    if (this.#destroyed) return;
    this.#destroyed = true;
    this.uniforms.destroy();
    for (const b of this.#buffers) b.destroy();
    this.#buffers.clear();
    this.#readback.destroy();
    this.#timer.destroy();
    this.#pipelineCache.clear();
    this.device.destroy();
  }
}
