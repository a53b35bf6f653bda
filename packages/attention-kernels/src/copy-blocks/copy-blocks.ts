import type { Gpu } from '@kvasir/gpu';
import { bindingSize, requireBindable, requireBytes } from '../binding-checks.js';
import { AttentionKernelError } from '../errors.js';
import { type KvCacheConfig, type KvCacheLayout, kvCacheLayout } from '../layout.js';
import { COPY_PAIRS_PER_DISPATCH, COPY_WORKGROUP, copyBlocksShader } from './copy-blocks.wgsl.js';
import { type BlockPairs, checkBlockPairs, flattenPairs } from './copy-blocks-reference.js';

/** Inputs of one {@link CopyBlocks} call. */
export interface CopyBlocksArgs {
  /** One layer's cache buffer. */
  readonly kvCache: GPUBuffer;
  /** Copies `src → dst` by physical block id. */
  readonly pairs: BlockPairs;
  /**
   * Copy into this buffer instead of `kvCache` (e.g. a staging buffer for swap-out), with
   * `copyBufferToBuffer` per block. Both buffers need COPY usage.
   */
  readonly dstCache?: GPUBuffer;
}

/**
 * Copy whole physical blocks (K, V and scales: one contiguous range per block and layer) for
 * copy-on-write and swap staging. Pairs are host data (they come from the allocator), checked
 * before anything is recorded, and ride in per-dispatch uniforms, so many calls can share one
 * submission.
 */
export class CopyBlocks {
  readonly layout: KvCacheLayout;
  readonly #gpu: Gpu;
  readonly #pipeline: GPUComputePipeline;

  private constructor(gpu: Gpu, layout: KvCacheLayout, pipeline: GPUComputePipeline) {
    this.#gpu = gpu;
    this.layout = layout;
    this.#pipeline = pipeline;
  }

  /**
   * Compile the copier for a cache configuration.
   *
   * @throws {AttentionKernelError} for a bad configuration, or `UNSUPPORTED_FORMAT` when a
   *   block is not a multiple of 4 words.
   */
  static async create(gpu: Gpu, config: KvCacheConfig): Promise<CopyBlocks> {
    const layout = kvCacheLayout(config);
    if (layout.blockWords % 4 !== 0) {
      throw new AttentionKernelError(
        'UNSUPPORTED_FORMAT',
        `Blocks of ${layout.blockWords} words are not a multiple of 4 words; format ${config.format.name} breaks the layout contract.`,
      );
    }
    const pipeline = await gpu.pipeline({ code: copyBlocksShader(), label: 'copy-blocks' });
    return new CopyBlocks(gpu, layout, pipeline);
  }

  /**
   * Record the copies into `encoder`.
   *
   * @throws {AttentionKernelError} `BLOCK_OUT_OF_RANGE`, `INVALID_ARGUMENT` (a destination used
   *   twice, or also a source within one buffer), `SHAPE_MISMATCH`, `DEVICE_LIMIT`.
   */
  encode(encoder: GPUCommandEncoder, args: CopyBlocksArgs): void {
    const bytes = this.layout.bytesPerBlock;
    requireBytes(args.kvCache, bytes, 'kvCache', 'one block');
    const numBlocks = Math.floor(bindingSize(args.kvCache) / bytes);
    const flat = flattenPairs(args.pairs);
    if (args.dstCache !== undefined) {
      requireBytes(args.dstCache, bytes, 'dstCache', 'one block');
      const dstBlocks = Math.floor(bindingSize(args.dstCache) / bytes);
      checkBlockPairs(flat, numBlocks, dstBlocks, true);
      for (let i = 0; i < flat.length; i += 2) {
        encoder.copyBufferToBuffer(
          args.kvCache,
          flat[i]! * bytes,
          args.dstCache,
          flat[i + 1]! * bytes,
          bytes,
        );
      }
      return;
    }
    requireBindable(args.kvCache, this.#gpu.limits.maxStorageBufferBindingSize, 'kvCache');
    checkBlockPairs(flat, numBlocks);
    const blockVec4 = this.layout.blockWords / 4;
    const xGroups = Math.ceil(blockVec4 / COPY_WORKGROUP);
    if (xGroups > this.#gpu.limits.maxComputeWorkgroupsPerDimension) {
      throw new AttentionKernelError(
        'DEVICE_LIMIT',
        `Blocks of ${bytes} bytes are too large to copy in one dispatch.`,
      );
    }
    for (let start = 0; start < flat.length / 2; start += COPY_PAIRS_PER_DISPATCH) {
      const count = Math.min(COPY_PAIRS_PER_DISPATCH, flat.length / 2 - start);
      const params = new Uint32Array(4 + COPY_PAIRS_PER_DISPATCH * 2);
      params[0] = count;
      params[1] = blockVec4;
      params.set(flat.subarray(start * 2, (start + count) * 2), 4);
      const binding = this.#gpu.uniforms.alloc(params);
      this.#gpu.dispatch(
        encoder,
        this.#pipeline,
        [args.kvCache, binding],
        [xGroups, count],
        'copy-blocks',
      );
    }
  }

  /**
   * {@link CopyBlocks.encode}, submitted and awaited.
   *
   * @throws as `encode`, and `GpuError` for WebGPU errors.
   */
  run(args: CopyBlocksArgs): Promise<void> {
    return this.#gpu.run((encoder) => this.encode(encoder, args));
  }
}
