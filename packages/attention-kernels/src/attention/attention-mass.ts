import { type Gpu, type GpuBinding, splitWorkgroups } from '@kvasir/gpu';
import { bindingSize, requireBindable, requireBytes } from '../binding-checks.js';
import { AttentionKernelError } from '../errors.js';
import type { KvCacheLayout } from '../layout.js';
import {
  massBlocksShader,
  massHeadsPerRow,
  massKeyChunk,
  massMergeShader,
  massPartialsInvocations,
  massPartialsShader,
} from './attention-mass.wgsl.js';
import {
  type PagedAttentionConfig,
  resolveScale,
  validateConfig,
  validateMass,
  validateSequences,
} from './config.js';

/** Host-side description of the rows whose attention mass one step wants. */
export interface AttentionMassBatch {
  /** Physical block ids, u32 `[numSeqs][maxBlocksPerSeq]`. */
  readonly blockTables: Uint32Array;
  /** Index of each sequence's first query row. */
  readonly queryStarts: Uint32Array;
  /** Query rows per sequence. */
  readonly queryLens: Uint32Array;
  /** Cached tokens per sequence, this step's included. */
  readonly contextLens: Uint32Array;
  /** Per sequence: how many of its last query rows count (0 = none). */
  readonly massQueries: Uint32Array;
  readonly numSeqs: number;
  readonly maxBlocksPerSeq: number;
  /** Rows of the query buffer. */
  readonly numTokens: number;
}

/**
 * A batch checked and uploaded once, reused by every layer of a step. Release it with
 * {@link AttentionMassPlan.release}.
 */
export class AttentionMassPlan {
  /** @internal */
  readonly owner: PagedAttentionMass;
  readonly numSeqs: number;
  readonly maxBlocksPerSeq: number;
  readonly numTokens: number;
  /** Largest `massQueries` entry (rows of the statistics pass per sequence and head). */
  readonly maxMassQueries: number;
  /** Key chunks of the longest asking context (invocations per row in the first pass). */
  readonly maxChunks: number;
  /** Smallest cache (in blocks) the plan's block tables fit. */
  readonly minBlocks: number;
  /** @internal */
  readonly buffers: {
    tables: GPUBuffer;
    seqs: GPUBuffer;
    partials: GPUBuffer;
    stats: GPUBuffer;
    local: GPUBuffer;
    params: GPUBuffer;
  };
  readonly #gpu: Gpu;
  #released = false;

  /** @internal */
  constructor(
    gpu: Gpu,
    owner: PagedAttentionMass,
    fields: Omit<AttentionMassPlan, 'release' | 'released' | 'owner'>,
  ) {
    this.#gpu = gpu;
    this.owner = owner;
    this.numSeqs = fields.numSeqs;
    this.maxBlocksPerSeq = fields.maxBlocksPerSeq;
    this.numTokens = fields.numTokens;
    this.maxMassQueries = fields.maxMassQueries;
    this.maxChunks = fields.maxChunks;
    this.minBlocks = fields.minBlocks;
    this.buffers = fields.buffers;
  }

  /** Whether {@link AttentionMassPlan.release} ran. */
  get released(): boolean {
    return this.#released;
  }

  /** Free the plan's buffers (idempotent). */
  release(): void {
    if (this.#released) return;
    this.#released = true;
    for (const b of Object.values(this.buffers)) this.#gpu.releaseBuffer(b);
  }
}

/** Buffers of one {@link PagedAttentionMass.encode}. */
export interface AttentionMassArgs {
  readonly plan: AttentionMassPlan;
  /** f32 `[numTokens][numQHeads][headDim]`: the queries attention used (RoPE applied). */
  readonly query: GpuBinding;
  /** One layer's cache buffer, this step's keys written. */
  readonly kvCache: GpuBinding;
  /** f32 `[numSeqs][maxBlocksPerSeq]`, ADDED into (so layers accumulate; clear it per step). */
  readonly massOut: GpuBinding;
}

/**
 * Per-block attention mass on the GPU, the twin of the CPU references' `massQueries` /
 * `massOut`: for each sequence's last `massQueries[s]` query rows and every query head, the
 * softmax probabilities over its causal keys, summed per logical block and added into
 * `massOut[s][block]`. A separate pass from the attention kernels (whose split-K decode never
 * holds a row's final max and denominator), recomputing `q·k` in three dispatches: per (row,
 * chunk of about 64 keys) the chunk's max and its sums of `exp(score - max)`, whole and per
 * block; their merge into each row's max and denominator; then per (sequence, block) the
 * block's sums rescaled and added. Each invocation's work is bounded (a chunk of keys, or the
 * rows × heads of one block), with no workgroup memory and no barriers (the shape software
 * adapters run fastest). A step that asks for no mass encodes none of it.
 */
export class PagedAttentionMass {
  readonly config: PagedAttentionConfig;
  readonly layout: KvCacheLayout;
  readonly #gpu: Gpu;
  readonly #workgroup: number;
  readonly #partials: GPUComputePipeline;
  readonly #merge: GPUComputePipeline;
  readonly #blocks: GPUComputePipeline;

  private constructor(
    gpu: Gpu,
    config: PagedAttentionConfig,
    layout: KvCacheLayout,
    workgroup: number,
    pipelines: [GPUComputePipeline, GPUComputePipeline, GPUComputePipeline],
  ) {
    this.#gpu = gpu;
    this.config = config;
    this.layout = layout;
    this.#workgroup = workgroup;
    [this.#partials, this.#merge, this.#blocks] = pipelines;
  }

  /**
   * Validate the configuration and compile both passes.
   *
   * @throws {AttentionKernelError} as the paged attention kernels' `create`.
   */
  static async create(gpu: Gpu, config: PagedAttentionConfig): Promise<PagedAttentionMass> {
    const layout = validateConfig(config);
    // One llvmpipe SIMD vector per workgroup on software adapters (more workgroups for its
    // threads), a common GPU width elsewhere.
    const workgroup = gpu.isSoftware ? 8 : 64;
    const o = {
      numQHeads: config.numQHeads,
      scale: resolveScale(config),
      softCap: config.softCap,
      workgroup,
    };
    const label = `attention-mass-${config.format.name}-d${config.headDim}-b${config.blockSize}-q${config.numQHeads}-kv${config.numKvHeads}-w${workgroup}`;
    const pipelines = await Promise.all([
      gpu.pipeline({ code: massPartialsShader(layout, o), label: `${label}-partials` }),
      gpu.pipeline({
        code: massMergeShader(o),
        label: `attention-mass-merge-q${config.numQHeads}-w${workgroup}`,
      }),
      gpu.pipeline({ code: massBlocksShader(layout, o), label: `${label}-blocks` }),
    ]);
    return new PagedAttentionMass(gpu, config, layout, workgroup, pipelines);
  }

  /**
   * Check a batch and upload it.
   *
   * @throws {AttentionKernelError} as the paged attention plans, for `massQueries` entries
   *   longer than their query or a batch that asks for no mass (`INVALID_ARGUMENT`), and
   *   `DEVICE_LIMIT` when the per-block sums (`numSeqs × max massQueries × numQHeads ×
   *   maxBlocksPerSeq` floats) exceed one storage binding.
   */
  plan(batch: AttentionMassBatch): AttentionMassPlan {
    const { numSeqs, maxBlocksPerSeq } = batch;
    const facts = validateSequences(this.config, this.layout, {
      ...batch,
      numQueryTokens: batch.numTokens,
    });
    const any = validateMass(
      { massQueries: batch.massQueries, massOut: numSeqs * maxBlocksPerSeq },
      numSeqs,
      maxBlocksPerSeq,
      batch.queryLens,
    );
    if (!any) {
      throw new AttentionKernelError(
        'INVALID_ARGUMENT',
        'no sequence asks for attention mass: skip the pass instead of planning it',
      );
    }
    const maxMassQueries = Math.max(...batch.massQueries);
    let maxContext = 0;
    for (let s = 0; s < numSeqs; s++) {
      if (batch.massQueries[s]! > 0) maxContext = Math.max(maxContext, batch.contextLens[s]!);
    }
    const maxChunks = Math.max(1, Math.ceil(maxContext / massKeyChunk(this.config.blockSize)));
    const rows = numSeqs * maxMassQueries * this.config.numQHeads;
    const localBytes = rows * maxBlocksPerSeq * 4;
    const maxBinding = this.#gpu.limits.maxStorageBufferBindingSize;
    if (localBytes > maxBinding || rows * maxChunks * 8 > maxBinding) {
      throw new AttentionKernelError(
        'DEVICE_LIMIT',
        `attention mass of ${numSeqs} sequences × ${maxMassQueries} queries × ${this.config.numQHeads} heads over ${maxBlocksPerSeq} blocks needs ${localBytes} bytes of per-block sums, over the device's maxStorageBufferBindingSize ${maxBinding}: ask for mass on fewer rows or queries per step`,
        { details: { numSeqs, maxMassQueries, maxBlocksPerSeq, bytes: localBytes, maxBinding } },
      );
    }
    const seqs = new Uint32Array(numSeqs * 4);
    for (let s = 0; s < numSeqs; s++) {
      seqs.set(
        [batch.queryStarts[s]!, batch.queryLens[s]!, batch.contextLens[s]!, batch.massQueries[s]!],
        4 * s,
      );
    }
    const g = this.#gpu;
    return new AttentionMassPlan(g, this, {
      numSeqs,
      maxBlocksPerSeq,
      numTokens: batch.numTokens,
      maxMassQueries,
      maxChunks,
      minBlocks: facts.maxBlockId + 1,
      buffers: {
        tables: g.storageBuffer(batch.blockTables, 'attention-mass-tables'),
        seqs: g.storageBuffer(seqs, 'attention-mass-seqs'),
        partials: g.storageBuffer(rows * maxChunks * 8, 'attention-mass-partials'),
        stats: g.storageBuffer(rows * 8, 'attention-mass-stats'),
        local: g.storageBuffer(localBytes, 'attention-mass-local'),
        params: g.uniformBuffer(
          new Uint32Array([maxBlocksPerSeq, maxMassQueries, maxChunks, numSeqs]),
          'attention-mass-params',
        ),
      },
    });
  }

  /**
   * Record both passes into `encoder` (after the layer's attention, before its query buffer is
   * overwritten).
   *
   * @throws {AttentionKernelError} `INVALID_ARGUMENT` (a released plan or another kernel's),
   *   `SHAPE_MISMATCH` (buffers too small), `BLOCK_OUT_OF_RANGE`, `DEVICE_LIMIT`.
   */
  encode(encoder: GPUCommandEncoder, args: AttentionMassArgs): void {
    const { plan } = args;
    if (plan.owner !== this || plan.released) {
      throw new AttentionKernelError(
        'INVALID_ARGUMENT',
        'the plan is released or belongs to another PagedAttentionMass',
      );
    }
    const { numQHeads, headDim } = this.config;
    requireBytes(
      args.query,
      plan.numTokens * numQHeads * headDim * 4,
      'query',
      `[${plan.numTokens}][${numQHeads}][${headDim}] f32`,
    );
    requireBytes(
      args.massOut,
      plan.numSeqs * plan.maxBlocksPerSeq * 4,
      'massOut',
      `[${plan.numSeqs}][${plan.maxBlocksPerSeq}] f32`,
    );
    requireBindable(args.kvCache, this.#gpu.limits.maxStorageBufferBindingSize, 'kvCache');
    const blocks = Math.floor(bindingSize(args.kvCache) / this.layout.bytesPerBlock);
    if (blocks < plan.minBlocks) {
      throw new AttentionKernelError(
        'BLOCK_OUT_OF_RANGE',
        `the block tables use block ${plan.minBlocks - 1}; the cache holds ${blocks} blocks`,
      );
    }
    const b = plan.buffers;
    const g = this.#gpu;
    const lim = g.limits.maxComputeWorkgroupsPerDimension;
    const groups = (count: number) => splitWorkgroups(Math.ceil(count / this.#workgroup), lim);
    const heads = this.config.numQHeads;
    const headGroups = heads / massHeadsPerRow(heads, this.config.numKvHeads);
    const common = { 0: args.query, 1: args.kvCache, 2: b.tables, 3: b.seqs, 4: b.params };
    g.dispatch(
      encoder,
      this.#partials,
      g.bindGroup(this.#partials, { ...common, 5: b.partials, 7: b.local }),
      groups(
        massPartialsInvocations(plan.numSeqs, plan.maxMassQueries, headGroups, plan.maxChunks),
      ),
      'attention-mass-partials',
    );
    g.dispatch(
      encoder,
      this.#merge,
      g.bindGroup(this.#merge, { 4: b.params, 5: b.partials, 6: b.stats }),
      groups(plan.numSeqs * plan.maxMassQueries * heads),
      'attention-mass-merge',
    );
    g.dispatch(
      encoder,
      this.#blocks,
      g.bindGroup(this.#blocks, {
        3: b.seqs,
        4: b.params,
        5: b.partials,
        6: b.stats,
        7: b.local,
        8: args.massOut,
      }),
      groups(plan.numSeqs * plan.maxBlocksPerSeq),
      'attention-mass-blocks',
    );
  }

  /**
   * One-off use: plan, encode, submit and read back the mass (`[numSeqs][maxBlocksPerSeq]`,
   * starting from zeros).
   *
   * @throws as `plan` and `encode`, and `GpuError` for WebGPU errors.
   */
  async run(
    args: AttentionMassBatch & { readonly query: Float32Array; readonly kvCache: GpuBinding },
  ): Promise<Float32Array> {
    const plan = this.plan(args);
    const g = this.#gpu;
    const query = g.storageBuffer(args.query, 'attention-mass-query');
    const massOut = g.storageBuffer(plan.numSeqs * plan.maxBlocksPerSeq * 4, 'attention-mass-out');
    try {
      await g.run((encoder) =>
        this.encode(encoder, { plan, query, kvCache: args.kvCache, massOut }),
      );
      return new Float32Array(await g.readBuffer(massOut));
    } finally {
      plan.release();
      g.releaseBuffer(query);
      g.releaseBuffer(massOut);
    }
  }
}
