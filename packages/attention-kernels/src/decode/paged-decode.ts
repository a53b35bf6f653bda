import type { Gpu, GpuBinding } from '@kvasir/gpu';
import {
  headsPerWorkgroup,
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
import type { AttentionShaderOptions } from '../attention/shader-common.wgsl.js';
import { SOFTWARE_WORKGROUP, softwareAttentionShader } from '../attention/software.wgsl.js';
import { DECODE_TILE, tiledAttentionShader } from '../attention/tiled.wgsl.js';
import { AttentionKernelError } from '../errors.js';
import type { KvCacheLayout } from '../layout.js';
import {
  HARDWARE_WORKGROUP,
  hardwareDecodeShader,
  hardwareDecodeWorkgroupBytes,
} from './hardware.wgsl.js';
import { splitKReduceShader } from './split-k-reduce.wgsl.js';
import {
  SUBGROUP_KEYS,
  SUBGROUP_KEYS_CHOICES,
  SUBGROUP_WORKGROUP,
  subgroupDecodeShader,
  subgroupDecodeWorkgroupBytes,
  subgroupLanesPerRow,
} from './subgroup.wgsl.js';

/** Smallest KV split (tokens) auto split-K picks: shorter splits cost more in pass 2 than they gain. */
const MIN_SPLIT_TOKENS = 256;

/** The pass-1 kernels of paged decode (see {@link PagedDecodeOptions.kernel}). */
export type DecodeKernelKind = 'hardware' | 'subgroup' | 'software' | 'tiled';

/** Options of {@link PagedDecodeAttention.create}. */
export interface PagedDecodeOptions extends PagedKernelTuning {
  /**
   * Workgroups that fill the device; automatic split-K splits long contexts until a batch
   * reaches this many. Default: 256 for the hardware-shaped kernel (256 invocations each; on an
   * H200 one split per sequence at batch 32, 256 workgroups, measured faster than 2 or 4),
   * 512 for the subgroup kernel (128 invocations each, about four per multiprocessor of a
   * large GPU), 1024 for the tiled kernel on a hardware adapter, 16 on software adapters (a
   * few CPU threads; a software-kernel workgroup is one 8-lane SIMD vector).
   */
  readonly targetWorkgroups?: number;
  /**
   * Which pass-1 kernel:
   * - `'hardware'`: 256 invocations per workgroup, scores then probabilities in workgroup
   *   memory, coalesced V reads (GPUs);
   * - `'subgroup'`: 128 invocations per workgroup in lane groups that each own whole keys,
   *   scores reduced with subgroup shuffles, no workgroup memory or barrier in the key loop
   *   (adapters with the `subgroups` feature; not picked by `'auto'`);
   * - `'software'`: one invocation per (sequence, split, KV head × head chunk), no workgroup
   *   memory and no barriers (CPU-emulated adapters such as llvmpipe, where barriers spill every
   *   live value to memory);
   * - `'tiled'`: 64 invocations per workgroup over tiles of 64 keys (any adapter; the fallback
   *   on hardware adapters whose limits do not fit `'hardware'`);
   * - `'auto'` (default): `'software'` on software adapters, else `'hardware'` when the
   *   adapter's limits allow it, else `'tiled'`.
   */
  readonly kernel?: DecodeKernelKind | 'auto';
  /**
   * Subgroup kernel only: consecutive keys each lane group scores per step, their K and V loads
   * in flight together (2, 4 or 8; default 4). More keys hide more memory latency per lane and
   * cost registers.
   */
  readonly subgroupKeysPerStep?: 2 | 4 | 8;
}

/**
 * Query heads per workgroup for a kernel whose workgroup memory is `bytesFor(heads)`: the
 * largest divisor of the group (at most the software kernel's) that fits the device; 0 when
 * none does.
 */
function headsThatFit(
  gpu: Gpu,
  config: PagedAttentionConfig,
  bytesFor: (heads: number) => number,
): number {
  const group = config.numQHeads / config.numKvHeads;
  for (let h = headsPerWorkgroup(group); h >= 1; h--) {
    if (group % h === 0 && bytesFor(h) <= gpu.limits.maxComputeWorkgroupStorageSize) return h;
  }
  return 0;
}

/** Heads per workgroup of the hardware-shaped kernel; 0 when the device cannot run it. */
function hardwareHeadsPerWorkgroup(gpu: Gpu, config: PagedAttentionConfig): number {
  if (gpu.limits.maxComputeInvocationsPerWorkgroup < HARDWARE_WORKGROUP) return 0;
  return headsThatFit(gpu, config, (h) =>
    hardwareDecodeWorkgroupBytes({ headDim: config.headDim, headsPerWorkgroup: h }),
  );
}

/**
 * Lanes per key row and heads per workgroup of the subgroup kernel, or `undefined` (with the
 * reason) when the device cannot run it.
 */
function subgroupShape(
  gpu: Gpu,
  config: PagedAttentionConfig,
): { lanesPerRow: number; heads: number } | { missing: string } {
  const min = gpu.adapterInfo.subgroupMinSize;
  if (!gpu.features.has('subgroups') || min === undefined || min < 1) {
    return { missing: "the adapter's 'subgroups' feature (and its subgroup sizes)" };
  }
  if (gpu.limits.maxComputeInvocationsPerWorkgroup < SUBGROUP_WORKGROUP) {
    return { missing: `${SUBGROUP_WORKGROUP} invocations per workgroup` };
  }
  const lanesPerRow = subgroupLanesPerRow(config.headDim, min);
  const bytesFor = (h: number) =>
    subgroupDecodeWorkgroupBytes({ headDim: config.headDim, headsPerWorkgroup: h, lanesPerRow });
  const heads = headsThatFit(gpu, config, bytesFor);
  if (heads > 0) return { lanesPerRow, heads };
  return { missing: `${bytesFor(1)} bytes of workgroup memory` };
}

/** Host-side description of one decode step, turned into a {@link PagedDecodePlan}. */
export interface PagedDecodeBatch {
  /** Physical block ids, u32 `[numSeqs][maxBlocksPerSeq]`. */
  readonly blockTables: Uint32Array;
  /** Cached tokens per sequence, the current one included (its K/V already written). */
  readonly contextLens: Uint32Array;
  readonly numSeqs: number;
  readonly maxBlocksPerSeq: number;
  /**
   * KV splits for the longest sequence (flash-decoding): `'auto'` (default) picks them from
   * `targetWorkgroups`; a number forces it (1 disables split-K, no second pass).
   */
  readonly numSplits?: number | 'auto';
}

/**
 * A decode batch checked and uploaded once, reusable by every layer of a step: block tables and
 * context lengths in one metadata buffer, the split-K choice and its scratch buffers.
 * Release it with {@link PagedDecodePlan.release} (or let `Gpu.destroy()` do it).
 */
export class PagedDecodePlan extends PagedPlanBase<PagedDecodeAttention> {
  readonly numSeqs: number;
  /** Keys per split (a multiple of the kernel's tile); `2^30` without split-K. */
  readonly chunkTokens: number;
  /** Splits of the longest sequence; 1 means one pass. */
  readonly numSplits: number;
  /** @internal */
  readonly partial: GPUBuffer | undefined;
  /** @internal */
  readonly ml: GPUBuffer | undefined;

  /** @internal */
  constructor(
    gpu: Gpu,
    owner: PagedDecodeAttention,
    fields: {
      numSeqs: number;
      chunkTokens: number;
      numSplits: number;
      maxBlockId: number;
      params: Uint32Array;
      meta: GPUBuffer;
      partial: GPUBuffer | undefined;
      ml: GPUBuffer | undefined;
    },
  ) {
    super(gpu, owner, fields, [fields.partial, fields.ml]);
    this.numSeqs = fields.numSeqs;
    this.chunkTokens = fields.chunkTokens;
    this.numSplits = fields.numSplits;
    this.partial = fields.partial;
    this.ml = fields.ml;
  }
}

/** Buffers of one {@link PagedDecodeAttention.encode}. */
export interface PagedDecodeArgs {
  readonly plan: PagedDecodePlan;
  /** f32 `[numSeqs][numQHeads][headDim]`. */
  readonly query: GpuBinding;
  /** One layer's cache buffer (README layout); its size fixes the number of blocks. */
  readonly kvCache: GpuBinding;
  /** f32 `[numSeqs][numQHeads][headDim]`, written. */
  readonly output: GpuBinding;
}

/** Arguments of {@link PagedDecodeAttention.run}: host arrays in, host array out. */
export interface PagedDecodeRunArgs extends PagedDecodeBatch {
  readonly query: Float32Array;
  readonly kvCache: GpuBinding;
}

/** Splits for a batch: keys per split and the longest sequence's split count. */
export function chooseDecodeSplits(
  contextLens: Uint32Array,
  workgroupsPerSeq: number,
  targetWorkgroups: number,
  numSplits: number | 'auto',
): { chunkTokens: number; numSplits: number } {
  let maxCtx = 0;
  for (const c of contextLens) maxCtx = Math.max(maxCtx, c);
  const roundUp = (x: number): number =>
    Math.max(DECODE_TILE, Math.ceil(x / DECODE_TILE) * DECODE_TILE);
  const whole = { chunkTokens: 2 ** 30, numSplits: 1 };
  if (numSplits !== 'auto') {
    if (numSplits <= 1 || maxCtx <= DECODE_TILE) return whole;
    const chunkTokens = roundUp(Math.ceil(maxCtx / numSplits));
    const n = Math.ceil(maxCtx / chunkTokens);
    return n <= 1 ? whole : { chunkTokens, numSplits: n };
  }
  if (contextLens.length * workgroupsPerSeq >= targetWorkgroups || maxCtx <= MIN_SPLIT_TOKENS) {
    return whole;
  }
  let best = whole;
  for (let n = 2; n <= 256; n++) {
    const chunkTokens = Math.max(MIN_SPLIT_TOKENS, roundUp(Math.ceil(maxCtx / n)));
    let total = 0;
    for (const c of contextLens)
      total += Math.max(1, Math.ceil(c / chunkTokens)) * workgroupsPerSeq;
    best = { chunkTokens, numSplits: Math.ceil(maxCtx / chunkTokens) };
    if (total >= targetWorkgroups || chunkTokens === MIN_SPLIT_TOKENS) break;
  }
  return best.numSplits <= 1 ? whole : best;
}

/**
 * Paged decode attention on WebGPU: one query token per sequence attends to its cached context
 * through its block table. MHA, MQA and GQA (the query heads of a KV head's group share one
 * workgroup, so each K/V row is read once for the group; groups larger than 8 heads are
 * handled in chunks of up to 8), head dims 16 to 128 in steps of 16, any {@link KvFormat}, optional
 * soft-cap, and split-K (flash-decoding) with a second pass when one split per sequence would
 * leave the device idle.
 *
 * Build once per configuration with {@link PagedDecodeAttention.create}; per step, make a
 * {@link PagedDecodePlan} from the host batch, then `encode` each layer into your encoder.
 *
 * @example
 * ```ts
 * const decode = await PagedDecodeAttention.create(gpu, {
 *   numQHeads: 32, numKvHeads: 8, headDim: 128, blockSize: 16, format: f16Format,
 * });
 * const plan = decode.plan({ blockTables, contextLens, numSeqs: 4, maxBlocksPerSeq: 64 });
 * for (const layer of layers) decode.encode(encoder, { plan, query, kvCache: layer.cache, output });
 * gpu.submit(encoder);
 * ```
 */
export class PagedDecodeAttention {
  /** The configuration, with its cache layout. */
  readonly config: PagedAttentionConfig;
  readonly layout: KvCacheLayout;
  /** Query heads per workgroup. */
  readonly headsPerWorkgroup: number;
  readonly targetWorkgroups: number;
  /** Which pass-1 kernel was built (see {@link PagedDecodeOptions.kernel}). */
  readonly kernel: DecodeKernelKind;
  readonly #gpu: Gpu;
  readonly #single: GPUComputePipeline;
  readonly #split: GPUComputePipeline;
  readonly #reduce: GPUComputePipeline;

  private constructor(
    gpu: Gpu,
    config: PagedAttentionConfig,
    layout: KvCacheLayout,
    hpw: number,
    target: number,
    kernel: DecodeKernelKind,
    pipelines: [GPUComputePipeline, GPUComputePipeline, GPUComputePipeline],
  ) {
    this.kernel = kernel;
    this.#gpu = gpu;
    this.config = config;
    this.layout = layout;
    this.headsPerWorkgroup = hpw;
    this.targetWorkgroups = target;
    [this.#single, this.#split, this.#reduce] = pipelines;
  }

  /**
   * Check `config` and compile its pipelines (through the `Gpu` pipeline cache).
   *
   * @throws {AttentionKernelError} `INVALID_ARGUMENT`, `UNSUPPORTED_HEAD_DIM` or
   *   `UNSUPPORTED_FORMAT` for a bad configuration.
   * @throws {GpuError} `SHADER_COMPILE` / `PIPELINE` if the generated WGSL is rejected.
   */
  static async create(
    gpu: Gpu,
    config: PagedAttentionConfig,
    options: PagedDecodeOptions = {},
  ): Promise<PagedDecodeAttention> {
    const layout = validateConfig(config);
    const kind = options.kernel ?? 'auto';
    if (!['auto', 'hardware', 'subgroup', 'software', 'tiled'].includes(kind)) {
      throw new AttentionKernelError(
        'INVALID_ARGUMENT',
        `kernel must be 'auto', 'hardware', 'subgroup', 'software' or 'tiled', got '${String(kind)}'`,
      );
    }
    const keysPerStep = options.subgroupKeysPerStep ?? SUBGROUP_KEYS;
    if (!(SUBGROUP_KEYS_CHOICES as readonly number[]).includes(keysPerStep)) {
      throw new AttentionKernelError(
        'INVALID_ARGUMENT',
        `subgroupKeysPerStep must be ${SUBGROUP_KEYS_CHOICES.join(', ')}, got ${String(keysPerStep)}`,
      );
    }
    const subgroup = kind === 'subgroup' ? subgroupShape(gpu, config) : undefined;
    if (subgroup !== undefined && 'missing' in subgroup) {
      throw new AttentionKernelError(
        'DEVICE_LIMIT',
        `the subgroup decode kernel needs ${subgroup.missing}`,
      );
    }
    const hardwareHeads =
      kind === 'hardware' || (kind === 'auto' && !gpu.isSoftware)
        ? hardwareHeadsPerWorkgroup(gpu, config)
        : 0;
    if (kind === 'hardware' && hardwareHeads === 0) {
      throw new AttentionKernelError(
        'DEVICE_LIMIT',
        `the hardware-shaped decode kernel needs ${HARDWARE_WORKGROUP} invocations per workgroup and ${hardwareDecodeWorkgroupBytes({ headDim: config.headDim, headsPerWorkgroup: 1 })} bytes of workgroup memory`,
      );
    }
    const kernel: DecodeKernelKind =
      kind !== 'auto'
        ? kind
        : gpu.isSoftware
          ? 'software'
          : hardwareHeads > 0
            ? 'hardware'
            : 'tiled';
    const target =
      options.targetWorkgroups ??
      (gpu.isSoftware ? 16 : { tiled: 1024, subgroup: 512, hardware: 256, software: 256 }[kernel]);
    if (!Number.isInteger(target) || target <= 0) {
      throw new AttentionKernelError(
        'INVALID_ARGUMENT',
        `targetWorkgroups must be a positive integer, got ${target}`,
      );
    }
    const hpw =
      kernel === 'hardware'
        ? hardwareHeads
        : subgroup !== undefined
          ? subgroup.heads
          : headsPerWorkgroup(config.numQHeads / config.numKvHeads);
    const tuning = resolveTuning(gpu, config.headDim, options);
    const common = pagedShaderOptions(config, layout, hpw, 1, tuning);
    const lanesPerRow = subgroup?.lanesPerRow ?? 1;
    const label = `${pagedPipelineLabel('paged-decode', config, tuning)}-${kernel}${subgroup === undefined ? '' : `-r${lanesPerRow}-u${keysPerStep}`}`;
    const shader = {
      hardware: hardwareDecodeShader,
      subgroup: (o: AttentionShaderOptions) =>
        subgroupDecodeShader({ ...o, lanesPerRow, keysPerStep }),
      software: softwareAttentionShader,
      tiled: tiledAttentionShader,
    }[kernel];
    const pipelines = await Promise.all([
      gpu.pipeline({ code: shader({ ...common, mode: 'decode' }), label }),
      gpu.pipeline({
        code: shader({ ...common, mode: 'decode-split' }),
        label: `${label}-split`,
      }),
      gpu.pipeline({
        code: splitKReduceShader({
          headDim: config.headDim,
          numQHeads: config.numQHeads,
          sinks: common.sinks,
        }),
        label: `${label}-reduce`,
      }),
    ]);
    return new PagedDecodeAttention(gpu, config, layout, hpw, target, kernel, pipelines);
  }

  /**
   * Workgroups per sequence and split: one per KV head × head chunk, or (software kernel) one
   * per {@link SOFTWARE_WORKGROUP} of them.
   */
  get workgroupsPerSeq(): number {
    const units = (this.config.numQHeads / this.headsPerWorkgroup) | 0;
    return this.kernel === 'software' ? Math.ceil(units / SOFTWARE_WORKGROUP) : units;
  }

  /** The pass-1 grid for `splits` splits of `numSeqs` sequences. */
  #grid(splits: number, numSeqs: number): [number, number, number] {
    const perSeq = this.workgroupsPerSeq;
    return this.kernel === 'software' ? [perSeq, splits, numSeqs] : [splits, perSeq, numSeqs];
  }

  /**
   * Check a batch on the host, choose split-K, and upload its metadata.
   *
   * @throws {AttentionKernelError} `SHAPE_MISMATCH`, `CONTEXT_TOO_LONG`, `INVALID_ARGUMENT`.
   */
  plan(batch: PagedDecodeBatch): PagedDecodePlan {
    const { numSeqs, maxBlocksPerSeq, blockTables, contextLens } = batch;
    const facts = validateSequences(this.config, this.layout, {
      numSeqs,
      maxBlocksPerSeq,
      blockTables,
      contextLens,
      queryStarts: Uint32Array.from({ length: contextLens.length }, (_, s) => s),
      queryLens: contextLens.map((c) => (c > 0 ? 1 : 0)),
      numQueryTokens: numSeqs,
    });
    const requested = batch.numSplits ?? 'auto';
    if (requested !== 'auto' && (!Number.isInteger(requested) || requested < 1)) {
      throw new AttentionKernelError(
        'INVALID_ARGUMENT',
        `numSplits must be 'auto' or a positive integer, got ${requested}`,
      );
    }
    const { chunkTokens, numSplits } = chooseDecodeSplits(
      contextLens,
      this.workgroupsPerSeq,
      this.targetWorkgroups,
      requested,
    );
    const meta = new Uint32Array(numSeqs * maxBlocksPerSeq + numSeqs);
    meta.set(blockTables);
    meta.set(contextLens, numSeqs * maxBlocksPerSeq);
    const params = new Uint32Array([
      numSeqs,
      maxBlocksPerSeq,
      numSeqs * maxBlocksPerSeq,
      chunkTokens,
      numSplits,
      0,
      0,
      0,
    ]);
    const rows = numSeqs * this.config.numQHeads * numSplits;
    const split = numSplits > 1;
    return new PagedDecodePlan(this.#gpu, this, {
      numSeqs,
      chunkTokens,
      numSplits,
      maxBlockId: facts.maxBlockId,
      params,
      meta: this.#gpu.storageBuffer(meta, 'paged-decode-meta'),
      partial: split
        ? this.#gpu.storageBuffer(rows * this.config.headDim * 4, 'paged-decode-partial')
        : undefined,
      ml: split ? this.#gpu.storageBuffer(rows * 8, 'paged-decode-ml') : undefined,
    });
  }

  /** A kernel whose plans this one encodes too (see {@link acceptPlansOf}). */
  plansOf: PagedDecodeAttention | undefined;

  /**
   * Lets this kernel encode `base`'s plans, so that kernels differing only in values baked
   * into their WGSL (a model's per-layer attention sinks) share one plan per step.
   *
   * @throws {AttentionKernelError} `INVALID_ARGUMENT` when their kernel, heads per workgroup,
   *   geometry or layout differ.
   */
  acceptPlansOf(base: PagedDecodeAttention): void {
    checkSharedPlans(this, base);
    this.plansOf = base;
  }

  /**
   * Record the attention of `args.plan`'s batch over one layer's cache into `encoder` (one
   * compute pass, or two with split-K). All checks run before anything is recorded.
   *
   * @throws {AttentionKernelError} `INVALID_ARGUMENT` (a plan of another kernel, or released),
   *   `SHAPE_MISMATCH` (buffers too small), `BLOCK_OUT_OF_RANGE` (the cache is smaller than the
   *   block tables need), `DEVICE_LIMIT` (a cache larger than one storage binding).
   */
  encode(encoder: GPUCommandEncoder, args: PagedDecodeArgs): void {
    const { plan } = args;
    checkPagedEncode(this.#gpu, this, 'decode', plan, plan.numSeqs, args);
    const { numQHeads } = this.config;
    const params = this.#gpu.uniforms.alloc(plan.params);
    if (plan.numSplits === 1) {
      this.#gpu.dispatch(
        encoder,
        this.#single,
        [params, args.query, args.kvCache, plan.meta, args.output],
        this.#grid(1, plan.numSeqs),
        'paged-decode',
      );
      return;
    }
    this.#gpu.dispatch(
      encoder,
      this.#split,
      [params, args.query, args.kvCache, plan.meta, plan.partial!, plan.ml!],
      this.#grid(plan.numSplits, plan.numSeqs),
      'paged-decode-split',
    );
    this.#gpu.dispatch(
      encoder,
      this.#reduce,
      [params, plan.partial!, plan.ml!, plan.meta, args.output],
      [numQHeads, plan.numSeqs],
      'paged-decode-reduce',
    );
  }

  /**
   * Plan, upload `query`, encode, submit, and read the output back: for tests and one-off use.
   *
   * @returns f32 `[numSeqs][numQHeads][headDim]`.
   * @throws as {@link PagedDecodeAttention.plan} and {@link PagedDecodeAttention.encode}
   *   (`SHAPE_MISMATCH` also for a query of the wrong length), and `GpuError` for WebGPU errors.
   */
  async run(args: PagedDecodeRunArgs): Promise<Float32Array> {
    const want = args.numSeqs * this.config.numQHeads * this.config.headDim;
    if (args.query.length !== want) {
      throw new AttentionKernelError(
        'SHAPE_MISMATCH',
        `query has length ${args.query.length}, expected ${want}`,
        { details: { got: args.query.length, want } },
      );
    }
    const plan = this.plan(args);
    return runPagedOnce(
      this.#gpu,
      'decode',
      plan,
      args.query,
      args.kvCache,
      want * 4,
      undefined,
      (encoder, buffers) => this.encode(encoder, buffers),
    );
  }
}
