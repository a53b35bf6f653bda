import type { Gpu, GpuBinding } from '@kvasir/gpu';
import { splitWorkgroups } from '@kvasir/gpu';
import { requireBytes, requireCount } from '../binding-checks.js';
import { ROPE_WORKGROUP, ropeShader } from './rope.wgsl.js';
import {
  checkPositions,
  checkRopeConfig,
  type RopeConfig,
  type RopeTables,
  ropeTables,
} from './rope-reference.js';

/** Inputs of one {@link ApplyRope} dispatch. */
export interface ApplyRopeArgs {
  /** Queries, f32 `[numTokens][numQHeads][headDim]`, rotated in place. */
  readonly q: GpuBinding;
  /** Keys, f32 `[numTokens][numKvHeads][headDim]`, rotated in place. */
  readonly k: GpuBinding;
  /** u32 `[numTokens]`: each token's position. */
  readonly positions: GpuBinding;
  readonly numTokens: number;
  /** Host copy of `positions`; when given, each is checked against `maxPosition` first. */
  readonly positionsHost?: Uint32Array;
}

/**
 * Rotary position embeddings applied in place to Q and K at explicit positions, rotate-half
 * (HF Llama) or interleaved (GPT-J / GGUF), with configurable theta, partial rotary dims and
 * Llama-3 frequency scaling. The cos/sin tables are computed once on the CPU in f64, rounded to
 * f32 and uploaded at {@link ApplyRope.create}, so the GPU and {@link applyRopeReference} rotate
 * with the same factors.
 */
export class ApplyRope {
  readonly config: RopeConfig;
  /** The tables uploaded to the GPU (shared with the CPU reference). */
  readonly tables: RopeTables;
  readonly #gpu: Gpu;
  readonly #pipeline: GPUComputePipeline;
  readonly #cos: GPUBuffer;
  readonly #sin: GPUBuffer;

  private constructor(
    gpu: Gpu,
    config: RopeConfig,
    tables: RopeTables,
    pipeline: GPUComputePipeline,
  ) {
    this.#gpu = gpu;
    this.config = config;
    this.tables = tables;
    this.#pipeline = pipeline;
    this.#cos = gpu.storageBuffer(tables.cos, 'rope-cos');
    this.#sin = gpu.storageBuffer(tables.sin, 'rope-sin');
  }

  /**
   * Compute the tables, upload them and compile the kernel.
   *
   * @throws {AttentionKernelError} `INVALID_ARGUMENT` / `UNSUPPORTED_HEAD_DIM` for a bad config.
   */
  static async create(gpu: Gpu, config: RopeConfig): Promise<ApplyRope> {
    checkRopeConfig(config);
    const tables = ropeTables(config);
    const pipeline = await gpu.pipeline({
      code: ropeShader({ ...config, half: tables.half }),
      label: `rope-${config.style}-d${config.headDim}`,
    });
    return new ApplyRope(gpu, config, tables, pipeline);
  }

  /**
   * Record the rotation into `encoder`.
   *
   * @throws {AttentionKernelError} `SHAPE_MISMATCH` for buffers too small, `INVALID_ARGUMENT`
   *   for a bad count or (with `positionsHost`) a position ≥ `maxPosition`.
   */
  encode(encoder: GPUCommandEncoder, args: ApplyRopeArgs): void {
    const { numQHeads, numKvHeads, headDim, maxPosition } = this.config;
    requireCount(args.numTokens, 'numTokens');
    const n = args.numTokens;
    requireBytes(args.q, n * numQHeads * headDim * 4, 'q', `[${n}][${numQHeads}][${headDim}] f32`);
    requireBytes(
      args.k,
      n * numKvHeads * headDim * 4,
      'k',
      `[${n}][${numKvHeads}][${headDim}] f32`,
    );
    requireBytes(args.positions, n * 4, 'positions', `${n} u32`);
    if (args.positionsHost !== undefined) checkPositions(args.positionsHost, n, maxPosition);
    if (n === 0) return;
    const params = this.#gpu.uniforms.alloc(new Uint32Array([n, maxPosition, 0, 0]));
    const invocations = n * (numQHeads + numKvHeads) * this.tables.half;
    this.#gpu.dispatch(
      encoder,
      this.#pipeline,
      [args.q, args.k, args.positions, this.#cos, this.#sin, params],
      splitWorkgroups(
        Math.ceil(invocations / ROPE_WORKGROUP),
        this.#gpu.limits.maxComputeWorkgroupsPerDimension,
      ),
      'rope',
    );
  }

  /**
   * {@link ApplyRope.encode}, submitted and awaited.
   *
   * @throws as `encode`, and `GpuError` for WebGPU errors.
   */
  run(args: ApplyRopeArgs): Promise<void> {
    return this.#gpu.run((encoder) => this.encode(encoder, args));
  }

  /** Release the tables. */
  destroy(): void {
    this.#gpu.releaseBuffer(this.#cos);
    this.#gpu.releaseBuffer(this.#sin);
  }
}
