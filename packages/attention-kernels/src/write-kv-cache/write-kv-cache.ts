import type { Gpu, GpuBinding } from '@kvasir/gpu';
import { splitWorkgroups } from '@kvasir/gpu';
import { bindingSize, requireBindable, requireBytes, requireCount } from '../binding-checks.js';
import { type KvCacheConfig, type KvCacheLayout, kvCacheLayout } from '../layout.js';
import {
  WRITE_KV_WORKGROUP,
  writeKvCacheInvocations,
  writeKvCacheShader,
} from './write-kv-cache.wgsl.js';
import { checkSlots } from './write-kv-cache-reference.js';

/** Inputs of one {@link WriteKvCache} dispatch. */
export interface WriteKvCacheArgs {
  /** New keys, f32 `[numTokens][numKvHeads][headDim]`. */
  readonly key: GpuBinding;
  /** New values, same shape. */
  readonly value: GpuBinding;
  /** i32 `[numTokens]`: slot = block × blockSize + offset, -1 to skip. */
  readonly slotMapping: GpuBinding;
  /** One layer's cache buffer (README layout); its size fixes the number of blocks. */
  readonly kvCache: GpuBinding;
  readonly numTokens: number;
  /**
   * Host copy of `slotMapping`. When given, every slot is checked (range, duplicates) before
   * anything is encoded. Without it the kernel still skips out-of-range slots.
   */
  readonly slotMappingHost?: Int32Array;
}

/**
 * Scatter new tokens' K and V into their paged slots of one layer's cache (vLLM's
 * reshape_and_cache), encoding elements with the configured format. Build once per
 * configuration with {@link WriteKvCache.create}; `encode` records into your encoder.
 *
 * @example
 * ```ts
 * const write = await WriteKvCache.create(gpu, { numKvHeads: 8, headDim: 128, blockSize: 16, format: f16Format });
 * write.encode(encoder, { key, value, slotMapping, kvCache, numTokens });
 * ```
 */
export class WriteKvCache {
  /** The cache layout this writer was built for. */
  readonly layout: KvCacheLayout;
  readonly #gpu: Gpu;
  readonly #pipeline: GPUComputePipeline;

  private constructor(gpu: Gpu, layout: KvCacheLayout, pipeline: GPUComputePipeline) {
    this.#gpu = gpu;
    this.layout = layout;
    this.#pipeline = pipeline;
  }

  /**
   * Compile (through the `Gpu` pipeline cache) the writer for `config`.
   *
   * @throws {AttentionKernelError} `INVALID_ARGUMENT` or `UNSUPPORTED_HEAD_DIM` for a bad config.
   * @throws {GpuError} `SHADER_COMPILE` if the generated WGSL does not compile.
   */
  static async create(gpu: Gpu, config: KvCacheConfig): Promise<WriteKvCache> {
    const layout = kvCacheLayout(config);
    const pipeline = await gpu.pipeline({
      code: writeKvCacheShader(layout),
      label: `write-kv-cache-${config.format.name}-d${config.headDim}-b${config.blockSize}-h${config.numKvHeads}`,
    });
    return new WriteKvCache(gpu, layout, pipeline);
  }

  /** Number of blocks a cache binding holds. */
  blocksIn(kvCache: GpuBinding): number {
    return Math.floor(bindingSize(kvCache) / this.layout.bytesPerBlock);
  }

  /**
   * Record the write into `encoder`. All checks run before anything is recorded.
   *
   * @throws {AttentionKernelError} `SHAPE_MISMATCH` (buffers too small, a cache smaller than a
   *   block), `SLOT_OUT_OF_RANGE` / `INVALID_ARGUMENT` (with `slotMappingHost`),
   *   `DEVICE_LIMIT` (cache larger than one storage binding).
   */
  encode(encoder: GPUCommandEncoder, args: WriteKvCacheArgs): void {
    const { numKvHeads: H, headDim: D, blockSize: B } = this.layout;
    requireCount(args.numTokens, 'numTokens');
    const rowBytes = args.numTokens * H * D * 4;
    const shape = `[${args.numTokens}][${H}][${D}] f32`;
    requireBytes(args.key, rowBytes, 'key', shape);
    requireBytes(args.value, rowBytes, 'value', shape);
    requireBytes(
      args.slotMapping,
      args.numTokens * 4,
      'slotMapping',
      `${args.numTokens} i32 slots`,
    );
    requireBytes(args.kvCache, this.layout.bytesPerBlock, 'kvCache', 'one block');
    requireBindable(args.kvCache, this.#gpu.limits.maxStorageBufferBindingSize, 'kvCache');
    const numSlots = this.blocksIn(args.kvCache) * B;
    if (args.slotMappingHost !== undefined)
      checkSlots(args.slotMappingHost, args.numTokens, numSlots);
    if (args.numTokens === 0) return;
    const params = this.#gpu.uniforms.alloc(new Uint32Array([args.numTokens, numSlots, 0, 0]));
    this.#gpu.dispatch(
      encoder,
      this.#pipeline,
      [args.key, args.value, args.slotMapping, args.kvCache, params],
      splitWorkgroups(
        this.layout.format.rowScaled
          ? args.numTokens * H
          : Math.ceil(writeKvCacheInvocations(this.layout, args.numTokens) / WRITE_KV_WORKGROUP),
        this.#gpu.limits.maxComputeWorkgroupsPerDimension,
      ),
      'write-kv-cache',
    );
  }

  /**
   * {@link WriteKvCache.encode}, submitted and awaited.
   *
   * @throws as `encode`, and `GpuError` for WebGPU errors.
   */
  run(args: WriteKvCacheArgs): Promise<void> {
    return this.#gpu.run((encoder) => this.encode(encoder, args));
  }
}
