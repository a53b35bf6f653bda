import { type Gpu, type GpuBinding, mesaVersion } from '@kvasir/gpu';
import {
  headsPerWorkgroup,
  MAX_ROWS_PER_WORKGROUP,
  type PagedAttentionConfig,
  validateConfig,
  validateSequences,
} from '../attention/config.js';
import {
  checkPagedEncode,
  checkSharedPlans,
  type PagedKernelTuning,
  PagedPlanBase,
  pagedPipelineLabel,
  pagedShaderOptions,
  resolveTuning,
  runPagedOnce,
} from '../attention/kernel-common.js';
import {
  SOFTWARE_PREFILL_ROWS,
  SOFTWARE_WORKGROUP,
  softwareAttentionShader,
} from '../attention/software.wgsl.js';
import { tiledAttentionShader } from '../attention/tiled.wgsl.js';
import { AttentionKernelError } from '../errors.js';
import type { KvCacheLayout } from '../layout.js';

/** The prefill kernels (see {@link PagedPrefillOptions.kernel}). */
export type PrefillKernelKind = 'software' | 'tiled';

/** Options of {@link PagedPrefillAttention.create}. */
export interface PagedPrefillOptions extends PagedKernelTuning {
  /**
   * Which kernel: `'tiled'` (workgroups of 64 invocations over tiles of 64 keys, rows and
   * block ids staged in workgroup memory), `'software'` (one invocation per few tokens × KV
   * head chunk, no workgroup memory and no barriers: the shape CPU-emulated adapters such as
   * llvmpipe run fastest), or `'auto'` (default): see {@link autoPrefillKernel}.
   */
  readonly kernel?: PrefillKernelKind | 'auto';
}

/**
 * The prefill kernel `'auto'` picks: `'software'` on software adapters, except on Mesa 25 or
 * later, and `'tiled'` everywhere else. On Mesa 22.3's llvmpipe the barrier-free software
 * kernel runs 1.7× the tiled kernel's FLOP/s; on Mesa 25.0's llvmpipe it is the other way
 * round (the tiled kernel 1.23× the software one), so the choice follows the Mesa version
 * (Mesa 23 and 24 were not measured and keep the software kernel).
 */
export function autoPrefillKernel(gpu: Pick<Gpu, 'isSoftware' | 'adapterInfo'>): PrefillKernelKind {
  if (!gpu.isSoftware) return 'tiled';
  const mesa = mesaVersion(gpu.adapterInfo);
  return mesa !== undefined && mesa[0] >= 25 ? 'tiled' : 'software';
}

/** Host-side description of one prefill chunk, turned into a {@link PagedPrefillPlan}. */
export interface PagedPrefillBatch {
  /** Physical block ids, u32 `[numSeqs][maxBlocksPerSeq]`. */
  readonly blockTables: Uint32Array;
  /** Index of each sequence's first new token in the query rows (cumulative query lengths). */
  readonly queryStarts: Uint32Array;
  /** New tokens per sequence (at least 1). */
  readonly queryLens: Uint32Array;
  /** Cached tokens per sequence after writing the new ones: past + query length. */
  readonly contextLens: Uint32Array;
  readonly numSeqs: number;
  readonly maxBlocksPerSeq: number;
  /** Rows of the query and output buffers (tokens of all sequences). */
  readonly numTokens: number;
}

/**
 * A prefill batch checked and uploaded once, reusable by every layer of a step (work items,
 * per-sequence arrays and block tables in one metadata buffer). Release it with
 * {@link PagedPrefillPlan.release} (or let `Gpu.destroy()` do it).
 */
export class PagedPrefillPlan extends PagedPlanBase<PagedPrefillAttention> {
  readonly numTokens: number;
  /** Workgroups along x: (sequence, first token) work items. */
  readonly numItems: number;

  /** @internal */
  constructor(
    gpu: Gpu,
    owner: PagedPrefillAttention,
    fields: {
      numTokens: number;
      numItems: number;
      maxBlockId: number;
      params: Uint32Array;
      meta: GPUBuffer;
    },
  ) {
    super(gpu, owner, fields);
    this.numTokens = fields.numTokens;
    this.numItems = fields.numItems;
  }
}

/** Buffers of one {@link PagedPrefillAttention.encode}. */
export interface PagedPrefillArgs {
  readonly plan: PagedPrefillPlan;
  /** f32 `[numTokens][numQHeads][headDim]`. */
  readonly query: GpuBinding;
  /** One layer's cache buffer, the new tokens' K/V already written. */
  readonly kvCache: GpuBinding;
  /** f32 `[numTokens][numQHeads][headDim]`; rows of no sequence are left untouched. */
  readonly output: GpuBinding;
}

/** Arguments of {@link PagedPrefillAttention.run}: host arrays in, host array out. */
export interface PagedPrefillRunArgs extends Omit<PagedPrefillBatch, 'numTokens'> {
  /** f32 `[numTokens][numQHeads][headDim]`; its length fixes `numTokens`. */
  readonly query: Float32Array;
  readonly kvCache: GpuBinding;
}

/**
 * Paged causal prefill attention on WebGPU: a chunk of new tokens of several sequences at once,
 * each attending causally to its earlier cached tokens (chunked prefill, prefix-cache hits) and
 * to the chunk's own earlier tokens, all read from the paged cache (write the chunk's K/V with
 * `WriteKvCache` first). Row `i` of a sequence sees keys `0 .. past + i`. A workgroup packs a
 * few consecutive tokens with the query heads of one KV head's group, so every K/V row read
 * serves all of them; online softmax over 64-key tiles whose scores and block ids are staged
 * in workgroup memory (K/V rows go straight from the cache to the one invocation that uses
 * them, each word read once per workgroup).
 *
 * @example
 * ```ts
 * const prefill = await PagedPrefillAttention.create(gpu, {
 *   numQHeads: 32, numKvHeads: 8, headDim: 128, blockSize: 16, format: f16Format,
 * });
 * const plan = prefill.plan({ blockTables, queryStarts, queryLens, contextLens, numSeqs: 2, maxBlocksPerSeq: 64, numTokens });
 * prefill.encode(encoder, { plan, query, kvCache, output });
 * ```
 */
export class PagedPrefillAttention {
  readonly config: PagedAttentionConfig;
  readonly layout: KvCacheLayout;
  /** Query heads per workgroup. */
  readonly headsPerWorkgroup: number;
  /** Consecutive tokens per work item (a tiled workgroup, or a software-kernel invocation). */
  readonly tokensPerWorkgroup: number;
  /** Which kernel was built (see {@link PagedPrefillOptions.kernel}). */
  readonly kernel: PrefillKernelKind;
  readonly #gpu: Gpu;
  readonly #pipeline: GPUComputePipeline;

  private constructor(
    gpu: Gpu,
    config: PagedAttentionConfig,
    layout: KvCacheLayout,
    hpw: number,
    tpw: number,
    kernel: PrefillKernelKind,
    pipeline: GPUComputePipeline,
  ) {
    this.kernel = kernel;
    this.#gpu = gpu;
    this.config = config;
    this.layout = layout;
    this.headsPerWorkgroup = hpw;
    this.tokensPerWorkgroup = tpw;
    this.#pipeline = pipeline;
  }

  /**
   * Check `config` and compile its pipeline (through the `Gpu` pipeline cache).
   *
   * @throws {AttentionKernelError} `INVALID_ARGUMENT`, `UNSUPPORTED_HEAD_DIM` or
   *   `UNSUPPORTED_FORMAT` for a bad configuration.
   * @throws {GpuError} `SHADER_COMPILE` / `PIPELINE` if the generated WGSL is rejected.
   */
  static async create(
    gpu: Gpu,
    config: PagedAttentionConfig,
    options: PagedPrefillOptions = {},
  ): Promise<PagedPrefillAttention> {
    const layout = validateConfig(config);
    const kind = options.kernel ?? 'auto';
    if (kind !== 'auto' && kind !== 'software' && kind !== 'tiled') {
      throw new AttentionKernelError(
        'INVALID_ARGUMENT',
        `kernel must be 'auto', 'software' or 'tiled', got '${String(kind)}'`,
      );
    }
    const kernel = kind === 'auto' ? autoPrefillKernel(gpu) : kind;
    const hpw = headsPerWorkgroup(config.numQHeads / config.numKvHeads);
    const rows = kernel === 'software' ? SOFTWARE_PREFILL_ROWS : MAX_ROWS_PER_WORKGROUP;
    const tpw = Math.max(1, Math.floor(rows / hpw));
    const tuning = resolveTuning(gpu, config.headDim, options);
    const shaderOptions = pagedShaderOptions(config, layout, hpw, tpw, tuning);
    const pipeline = await gpu.pipeline({
      code: (kernel === 'software' ? softwareAttentionShader : tiledAttentionShader)({
        ...shaderOptions,
        mode: 'prefill',
      }),
      label: `${pagedPipelineLabel('paged-prefill', config, tuning)}-${kernel}`,
    });
    return new PagedPrefillAttention(gpu, config, layout, hpw, tpw, kernel, pipeline);
  }

  /**
   * Check a batch on the host and upload its metadata.
   *
   * @throws {AttentionKernelError} `SHAPE_MISMATCH`, `CONTEXT_TOO_LONG`, `INVALID_ARGUMENT`.
   */
  plan(batch: PagedPrefillBatch): PagedPrefillPlan {
    const { numSeqs, maxBlocksPerSeq, queryStarts, queryLens, contextLens } = batch;
    const facts = validateSequences(this.config, this.layout, {
      numSeqs,
      maxBlocksPerSeq,
      blockTables: batch.blockTables,
      contextLens,
      queryStarts,
      queryLens,
      numQueryTokens: batch.numTokens,
    });
    const items: number[] = [];
    for (let s = 0; s < numSeqs; s++) {
      for (let t = 0; t < queryLens[s]!; t += this.tokensPerWorkgroup) items.push(s, t);
    }
    const numItems = items.length / 2;
    const groupsX = this.#groupsX(numItems);
    if (groupsX > this.#gpu.limits.maxComputeWorkgroupsPerDimension) {
      throw new AttentionKernelError(
        'DEVICE_LIMIT',
        `${batch.numTokens} tokens need ${groupsX} workgroups along x, over the device's ${this.#gpu.limits.maxComputeWorkgroupsPerDimension}; split the chunk`,
      );
    }
    const n = items.length;
    const meta = new Uint32Array(n + 3 * numSeqs + numSeqs * maxBlocksPerSeq);
    meta.set(items);
    meta.set(queryStarts, n);
    meta.set(queryLens, n + numSeqs);
    meta.set(contextLens, n + 2 * numSeqs);
    meta.set(batch.blockTables, n + 3 * numSeqs);
    const params = new Uint32Array([
      numSeqs,
      maxBlocksPerSeq,
      n + 2 * numSeqs,
      // chunk_tokens: the work items (the software kernel's invocations past them leave).
      numItems,
      1,
      n + 3 * numSeqs,
      n,
      n + numSeqs,
    ]);
    return new PagedPrefillPlan(this.#gpu, this, {
      numTokens: batch.numTokens,
      numItems,
      maxBlockId: facts.maxBlockId,
      params,
      meta: this.#gpu.storageBuffer(meta, 'paged-prefill-meta'),
    });
  }

  /** A kernel whose plans this one encodes too (see {@link acceptPlansOf}). */
  plansOf: PagedPrefillAttention | undefined;

  /**
   * Lets this kernel encode `base`'s plans, so that kernels differing only in values baked
   * into their WGSL (a model's per-layer attention sinks) share one plan per step.
   *
   * @throws {AttentionKernelError} `INVALID_ARGUMENT` when their kernel, heads per workgroup,
   *   geometry or layout differ.
   */
  acceptPlansOf(base: PagedPrefillAttention): void {
    checkSharedPlans(this, base);
    this.plansOf = base;
  }

  /**
   * Record the prefill attention of `args.plan`'s batch over one layer's cache into `encoder`.
   * All checks run before anything is recorded.
   *
   * @throws {AttentionKernelError} `INVALID_ARGUMENT` (a plan of another kernel, or released),
   *   `SHAPE_MISMATCH`, `BLOCK_OUT_OF_RANGE`, `DEVICE_LIMIT`.
   */
  encode(encoder: GPUCommandEncoder, args: PagedPrefillArgs): void {
    const { plan } = args;
    checkPagedEncode(this.#gpu, this, 'prefill', plan, plan.numTokens, args);
    const { numQHeads } = this.config;
    if (plan.numItems === 0) return;
    const params = this.#gpu.uniforms.alloc(plan.params);
    this.#gpu.dispatch(
      encoder,
      this.#pipeline,
      [params, args.query, args.kvCache, plan.meta, args.output],
      this.kernel === 'software'
        ? [this.#groupsX(plan.numItems)]
        : [plan.numItems, numQHeads / this.headsPerWorkgroup],
      'paged-prefill',
    );
  }

  /** Workgroups along x for `numItems` work items. */
  #groupsX(numItems: number): number {
    if (this.kernel === 'tiled') return numItems;
    const units = this.config.numQHeads / this.headsPerWorkgroup;
    return Math.ceil((numItems * units) / SOFTWARE_WORKGROUP);
  }

  /**
   * Plan, upload `query`, encode, submit, and read the output back: for tests and one-off use.
   * Output rows of no sequence are zero.
   *
   * @returns f32 `[numTokens][numQHeads][headDim]`.
   * @throws as {@link PagedPrefillAttention.plan} and {@link PagedPrefillAttention.encode}, and
   *   `GpuError` for WebGPU errors.
   */
  async run(args: PagedPrefillRunArgs): Promise<Float32Array> {
    const rowFloats = this.config.numQHeads * this.config.headDim;
    if (args.query.length % rowFloats !== 0) {
      throw new AttentionKernelError(
        'SHAPE_MISMATCH',
        `query has length ${args.query.length}, not a multiple of numQHeads × headDim = ${rowFloats}`,
      );
    }
    const numTokens = args.query.length / rowFloats;
    const plan = this.plan({ ...args, numTokens });
    return runPagedOnce(
      this.#gpu,
      'prefill',
      plan,
      args.query,
      args.kvCache,
      Math.max(4, args.query.length * 4),
      args.query.length,
      (encoder, buffers) => this.encode(encoder, buffers),
    );
  }
}
