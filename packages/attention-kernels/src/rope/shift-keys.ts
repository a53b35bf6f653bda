import type { Gpu, GpuBinding } from '@kvasir/gpu';
import { splitWorkgroups } from '@kvasir/gpu';
import { bindingSize, requireBindable, requireBytes, requireCount } from '../binding-checks.js';
import { AttentionKernelError } from '../errors.js';
import type { KvCacheLayout } from '../layout.js';
import { type RopeTables, ropeTables } from './rope-reference.js';
import { shiftKeysShader } from './shift-keys.wgsl.js';
import {
  checkKeyShiftConfig,
  checkKeyShifts,
  type KeyShift,
  type KeyShiftConfig,
} from './shift-keys-reference.js';

/** Inputs of one {@link ShiftKeys} dispatch. */
export interface ShiftKeysArgs {
  /** One layer's cache buffer, rewritten in place. */
  readonly kvCache: GpuBinding;
  /** i32 pairs `[numShifts][block, delta]` (see {@link ShiftKeys.upload}). */
  readonly shifts: GpuBinding;
  readonly numShifts: number;
  /** Host copy of the shifts; when given, each is checked first (the kernel skips bad ones). */
  readonly shiftsHost?: readonly KeyShift[];
  /**
   * Tables of the same RoPE (`ropeTables({ ...config.rope, maxPosition })`) to read instead of
   * the kernel's own: a model that grows its tables with the positions it has seen passes
   * them, and creates the kernel with a small `rope.maxPosition`.
   */
  readonly ropeTables?: {
    readonly cos: GpuBinding;
    readonly sin: GpuBinding;
    readonly maxPosition: number;
  };
}

/**
 * RoPE key shifts on the GPU, the twin of {@link shiftKeysReference}: one dispatch per layer
 * buffer re-rotates the K rows of every listed block (all KV heads, all slots) by its delta, in
 * the cache's own format (decode, rotate in f32, encode; scales recomputed). V is untouched.
 * The RoPE tables of `config.rope` are computed at {@link ShiftKeys.create} and uploaded once.
 *
 * ```ts
 * const shift = await ShiftKeys.create(gpu, { numKvHeads: 8, headDim: 128, blockSize: 16,
 *   format: f16Format, rope: { numQHeads: 32, numKvHeads: 8, headDim: 128,
 *   style: 'rotate-half', theta: 500000, maxPosition: 8192 } });
 * const shifts = [{ block: 7, delta: -64 }, { block: 9, delta: -64 }];
 * const buf = shift.upload(shifts);
 * for (const layer of caches) shift.encode(encoder, { kvCache: layer, shifts: buf, numShifts: 2 });
 * ```
 */
export class ShiftKeys {
  readonly layout: KvCacheLayout;
  readonly config: KeyShiftConfig;
  /** The tables uploaded to the GPU (pass them to {@link shiftKeysReference}). */
  readonly tables: RopeTables;
  readonly #gpu: Gpu;
  readonly #pipeline: GPUComputePipeline;
  readonly #cos: GPUBuffer;
  readonly #sin: GPUBuffer;
  readonly #workgroup: number;

  private constructor(
    gpu: Gpu,
    config: KeyShiftConfig,
    layout: KvCacheLayout,
    tables: RopeTables,
    pipeline: GPUComputePipeline,
    workgroup: number,
  ) {
    this.#workgroup = workgroup;
    this.#gpu = gpu;
    this.config = config;
    this.layout = layout;
    this.tables = tables;
    this.#pipeline = pipeline;
    this.#cos = gpu.storageBuffer(tables.cos, 'shift-keys-cos');
    this.#sin = gpu.storageBuffer(tables.sin, 'shift-keys-sin');
  }

  /**
   * Check the configuration, compute and upload the RoPE tables, compile the kernel.
   *
   * @throws {AttentionKernelError} as {@link shiftKeysReference}'s configuration checks.
   */
  static async create(gpu: Gpu, config: KeyShiftConfig): Promise<ShiftKeys> {
    const layout = checkKeyShiftConfig(config);
    const tables = ropeTables(config.rope);
    // One llvmpipe SIMD vector per workgroup on software adapters, a common width elsewhere.
    const workgroup = gpu.isSoftware ? 8 : 64;
    const pipeline = await gpu.pipeline({
      code: shiftKeysShader(layout, { style: config.rope.style, half: tables.half }, workgroup),
      label: `shift-keys-${config.format.name}-d${config.headDim}-b${config.blockSize}-h${config.numKvHeads}-${config.rope.style}-r${tables.half * 2}-w${workgroup}`,
    });
    return new ShiftKeys(gpu, config, layout, tables, pipeline, workgroup);
  }

  /** The shifts as the i32 pairs the kernel reads, in a new storage buffer (release it after). */
  upload(shifts: readonly KeyShift[]): GPUBuffer {
    return this.#gpu.storageBuffer(ShiftKeys.pack(shifts), 'key-shifts');
  }

  /** The shifts as i32 pairs `[block, delta]`. */
  static pack(shifts: readonly KeyShift[]): Int32Array {
    const out = new Int32Array(Math.max(2, shifts.length * 2));
    shifts.forEach((s, i) => {
      out[2 * i] = s.block;
      out[2 * i + 1] = s.delta;
    });
    return out;
  }

  /**
   * Record the shift into `encoder`: one dispatch, nothing when `numShifts` is 0.
   *
   * @throws {AttentionKernelError} `SHAPE_MISMATCH` (buffers too small, a host copy of
   *   another length), `DEVICE_LIMIT`,
   *   `INVALID_ARGUMENT` / `BLOCK_OUT_OF_RANGE` (bad count, or a bad host shift).
   */
  encode(encoder: GPUCommandEncoder, args: ShiftKeysArgs): void {
    requireCount(args.numShifts, 'numShifts');
    requireBytes(args.kvCache, this.layout.bytesPerBlock, 'kvCache', 'one block');
    requireBindable(args.kvCache, this.#gpu.limits.maxStorageBufferBindingSize, 'kvCache');
    requireBytes(args.shifts, args.numShifts * 8, 'shifts', `${args.numShifts} i32 pairs`);
    const numBlocks = Math.floor(bindingSize(args.kvCache) / this.layout.bytesPerBlock);
    const tables = args.ropeTables;
    const maxPosition = tables?.maxPosition ?? this.config.rope.maxPosition;
    if (tables !== undefined) {
      const bytes = maxPosition * this.tables.half * 4;
      requireBytes(tables.cos, bytes, 'ropeTables.cos', `${maxPosition} positions`);
      requireBytes(tables.sin, bytes, 'ropeTables.sin', `${maxPosition} positions`);
    }
    if (args.shiftsHost !== undefined) {
      if (args.shiftsHost.length !== args.numShifts) {
        throw new AttentionKernelError(
          'SHAPE_MISMATCH',
          `shiftsHost has ${args.shiftsHost.length} shifts, numShifts is ${args.numShifts}.`,
        );
      }
      checkKeyShifts(args.shiftsHost, numBlocks, maxPosition);
    }
    if (args.numShifts === 0) return;
    const params = this.#gpu.uniforms.alloc(
      new Uint32Array([args.numShifts, numBlocks, maxPosition, 0]),
    );
    const { numKvHeads: H, blockSize: B } = this.layout;
    this.#gpu.dispatch(
      encoder,
      this.#pipeline,
      [args.kvCache, args.shifts, tables?.cos ?? this.#cos, tables?.sin ?? this.#sin, params],
      splitWorkgroups(
        Math.ceil((args.numShifts * H * B) / this.#workgroup),
        this.#gpu.limits.maxComputeWorkgroupsPerDimension,
      ),
      'shift-keys',
    );
  }

  /**
   * Shift the keys of one cache buffer from host shifts, submitted and awaited.
   *
   * @throws as `encode`, and `GpuError` for WebGPU errors.
   */
  async run(kvCache: GpuBinding, shifts: readonly KeyShift[]): Promise<void> {
    const buf = this.upload(shifts);
    try {
      await this.#gpu.run((encoder) =>
        this.encode(encoder, {
          kvCache,
          shifts: buf,
          numShifts: shifts.length,
          shiftsHost: shifts,
        }),
      );
    } finally {
      this.#gpu.releaseBuffer(buf);
    }
  }

  /** Release the tables. */
  destroy(): void {
    this.#gpu.releaseBuffer(this.#cos);
    this.#gpu.releaseBuffer(this.#sin);
  }
}
