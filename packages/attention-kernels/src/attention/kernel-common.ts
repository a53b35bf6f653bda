import type { Gpu, GpuBinding } from '@kvasir/gpu';
import { bindingSize, requireBindable, requireBytes } from '../binding-checks.js';
import { AttentionKernelError } from '../errors.js';
import type { F16Unpack } from '../kv-format/types.js';
import type { KvCacheLayout } from '../layout.js';
import { type PagedAttentionConfig, requireBlocks, resolveScale } from './config.js';
import type { AttentionShaderOptions } from './shader-common.wgsl.js';

/** What paged decode and prefill share in their shader options (all but the decode mode). */
export type PagedShaderOptions = Omit<AttentionShaderOptions, 'mode'>;

/**
 * Code-generation choices of the paged attention kernels that favour one kind of adapter over
 * another. The defaults follow the adapter: software adapters (llvmpipe) keep queries in
 * registers, own 4 V chunks per invocation and widen f16 with integer arithmetic; hardware
 * adapters read queries from workgroup memory, own 2 V chunks (fewer registers, more
 * occupancy) and widen f16 with `unpack2x16float`. Measured in the package README.
 * `queryInRegisters` and `vChunksPerLane` shape the tiled kernels (prefill, and decode with
 * `kernel: 'tiled'`); `f16Unpack` applies to every kernel.
 */
export interface PagedKernelTuning {
  readonly queryInRegisters?: boolean;
  /** 8-element V chunks per V-phase invocation: 2 or 4 (4 needs headDim a multiple of 32). */
  readonly vChunksPerLane?: 2 | 4;
  /** How f16 K/V are widened to f32 (see {@link KvWgslOptions.f16Unpack}). */
  readonly f16Unpack?: F16Unpack;
}

/**
 * The tuning for `gpu` and `headDim`, with defaults filled in.
 *
 * @throws {AttentionKernelError} `INVALID_ARGUMENT` for a `vChunksPerLane` that does not divide
 *   the head dim's 8-element chunks.
 */
export function resolveTuning(
  gpu: Gpu,
  headDim: number,
  tuning: PagedKernelTuning = {},
): Required<PagedKernelTuning> {
  const chunks = headDim / 8;
  const fallback = gpu.isSoftware && chunks % 4 === 0 ? 4 : 2;
  const vChunksPerLane = tuning.vChunksPerLane ?? fallback;
  if ((vChunksPerLane !== 2 && vChunksPerLane !== 4) || chunks % vChunksPerLane !== 0) {
    throw new AttentionKernelError(
      'INVALID_ARGUMENT',
      `vChunksPerLane must be 2 or 4 and divide headDim / 8 = ${chunks}, got ${String(vChunksPerLane)}`,
    );
  }
  const f16Unpack = tuning.f16Unpack ?? (gpu.isSoftware ? 'integer' : 'builtin');
  if (f16Unpack !== 'builtin' && f16Unpack !== 'integer') {
    throw new AttentionKernelError(
      'INVALID_ARGUMENT',
      `f16Unpack must be 'builtin' or 'integer', got ${String(f16Unpack)}`,
    );
  }
  return {
    queryInRegisters: tuning.queryInRegisters ?? gpu.isSoftware,
    vChunksPerLane,
    f16Unpack,
  };
}

/** Shader options of a checked configuration with its heads and tokens per workgroup. */
export function pagedShaderOptions(
  config: PagedAttentionConfig,
  layout: KvCacheLayout,
  headsPerWorkgroup: number,
  tokensPerWorkgroup: number,
  tuning: Required<PagedKernelTuning>,
): PagedShaderOptions {
  const scale = resolveScale(config);
  return {
    ...tuning,
    headDim: config.headDim,
    numQHeads: config.numQHeads,
    numKvHeads: config.numKvHeads,
    headsPerWorkgroup,
    tokensPerWorkgroup,
    blockSize: config.blockSize,
    slabWords: layout.slabWords,
    blockWords: layout.blockWords,
    // exp2 in the kernel: fold log2(e) into q unless the soft-cap's tanh must see raw scores.
    qScale: config.softCap === undefined ? scale * Math.LOG2E : scale,
    softCap: config.softCap,
    window: config.window,
    sinks: config.sinks?.map((v) => v * Math.LOG2E),
    kvLoad: config.format.wgslLoad({
      headDim: config.headDim,
      blockSize: config.blockSize,
      f16Unpack: tuning.f16Unpack,
    }),
    rotation: config.format.rotation,
  };
}

/** Pipeline label naming the kernel and every configuration field that changes its WGSL. */
export function pagedPipelineLabel(
  kernel: string,
  config: PagedAttentionConfig,
  tuning: Required<PagedKernelTuning>,
): string {
  return `${kernel}-${config.format.name}-d${config.headDim}-q${config.numQHeads}-kv${config.numKvHeads}-b${config.blockSize}${tuning.queryInRegisters ? '-qr' : ''}-v${tuning.vChunksPerLane}${tuning.f16Unpack === 'integer' ? '-hi' : ''}${config.window === undefined ? '' : `-w${config.window}`}${config.sinks === undefined ? '' : `-s${sinksKey(config.sinks)}`}`;
}

/** What a kernel needs to know of a plan to check it at encode time. */
interface PlanLike {
  readonly owner: unknown;
  readonly released: boolean;
  readonly maxBlockId: number;
}

/** Buffers of one encode, shared by decode and prefill. */
interface EncodeBuffers {
  readonly query: GpuBinding;
  readonly kvCache: GpuBinding;
  readonly output: GpuBinding;
}

/**
 * The encode-time checks of paged decode and prefill: the plan is the kernel's own and live,
 * query and output hold `rows` f32 rows of `[numQHeads][headDim]`, and the cache is bindable
 * and holds every block the plan's tables name.
 *
 * @throws {AttentionKernelError} `INVALID_ARGUMENT` (a plan of another kernel, or released),
 *   `SHAPE_MISMATCH`, `BLOCK_OUT_OF_RANGE`, `DEVICE_LIMIT`.
 */
export function checkPagedEncode(
  gpu: Gpu,
  kernel: {
    readonly config: PagedAttentionConfig;
    readonly layout: KvCacheLayout;
    /** Another kernel whose plans this one encodes too ({@link checkSharedPlans}). */
    readonly plansOf?: unknown;
  },
  what: 'decode' | 'prefill',
  plan: PlanLike,
  rows: number,
  args: EncodeBuffers,
): void {
  if ((plan.owner !== kernel && plan.owner !== kernel.plansOf) || plan.released) {
    throw new AttentionKernelError(
      'INVALID_ARGUMENT',
      plan.released
        ? `the ${what} plan was released`
        : `the ${what} plan belongs to another kernel`,
    );
  }
  const { numQHeads, headDim } = kernel.config;
  const bytes = rows * numQHeads * headDim * 4;
  const shape = `[${rows}][${numQHeads}][${headDim}] f32`;
  requireBytes(args.query, bytes, 'query', shape);
  requireBytes(args.output, bytes, 'output', shape);
  requireBytes(args.kvCache, kernel.layout.bytesPerBlock, 'kvCache', 'one block');
  requireBindable(args.kvCache, gpu.limits.maxStorageBufferBindingSize, 'kvCache');
  requireBlocks(
    plan.maxBlockId,
    Math.floor(bindingSize(args.kvCache) / kernel.layout.bytesPerBlock),
  );
}

/**
 * The one-off `run` of paged decode and prefill: upload `query`, encode `plan` into a fresh
 * output buffer of `outputBytes`, submit, and read back its first `outputFloats` floats (all of
 * it when undefined). The plan and both buffers are released whatever happens.
 */
export async function runPagedOnce<P extends { release(): void }>(
  gpu: Gpu,
  what: 'decode' | 'prefill',
  plan: P,
  queryData: Float32Array,
  kvCache: GpuBinding,
  outputBytes: number,
  outputFloats: number | undefined,
  encode: (encoder: GPUCommandEncoder, args: { plan: P } & EncodeBuffers) => void,
): Promise<Float32Array> {
  const query = gpu.storageBuffer(queryData, `paged-${what}-query`);
  const output = gpu.storageBuffer(outputBytes, `paged-${what}-output`);
  try {
    await gpu.run((encoder) => encode(encoder, { plan, query, kvCache, output }));
    return new Float32Array(await gpu.readBuffer(output), 0, outputFloats);
  } finally {
    plan.release();
    gpu.releaseBuffer(query);
    gpu.releaseBuffer(output);
  }
}

/**
 * What paged decode and prefill plans share: the uploaded metadata and parameters, the largest
 * block id for the encode-time cache check, and idempotent release of the plan's buffers.
 */
export abstract class PagedPlanBase<Owner> {
  /** Largest block id used, checked against each cache at encode time. */
  readonly maxBlockId: number;
  /** @internal */
  readonly owner: Owner;
  /** @internal */
  readonly params: Uint32Array;
  /** @internal */
  readonly meta: GPUBuffer;
  readonly #gpu: Gpu;
  readonly #scratch: readonly (GPUBuffer | undefined)[];
  #released = false;

  /** @internal */
  protected constructor(
    gpu: Gpu,
    owner: Owner,
    fields: { maxBlockId: number; params: Uint32Array; meta: GPUBuffer },
    scratch: readonly (GPUBuffer | undefined)[] = [],
  ) {
    this.#gpu = gpu;
    this.owner = owner;
    this.maxBlockId = fields.maxBlockId;
    this.params = fields.params;
    this.meta = fields.meta;
    this.#scratch = scratch;
  }

  /** True after `release()`. */
  get released(): boolean {
    return this.#released;
  }

  /** Free the plan's GPU buffers. Idempotent; the plan cannot be encoded afterwards. */
  release(): void {
    if (this.#released) return;
    this.#released = true;
    this.#gpu.releaseBuffer(this.meta);
    for (const b of this.#scratch) if (b !== undefined) this.#gpu.releaseBuffer(b);
  }
}

/** A short key of a kernel's sink values (they are baked into its WGSL). */
function sinksKey(sinks: readonly number[]): string {
  let h = 0x811c9dc5;
  const f = new Float32Array(sinks);
  for (const w of new Uint32Array(f.buffer)) {
    h = Math.imul(h ^ w, 0x01000193) >>> 0;
  }
  return `${sinks.length}x${h.toString(16)}`;
}

/**
 * Checks that `kernel` may encode `base`'s plans: the same kernel kind, heads per workgroup,
 * head geometry and cache layout, so a plan's grid, splits and buffers fit both (kernels that
 * differ only in values baked into their WGSL, such as attention sinks).
 *
 * @throws {AttentionKernelError} `INVALID_ARGUMENT` naming the first difference.
 */
export function checkSharedPlans(
  kernel: {
    readonly kernel: string;
    readonly headsPerWorkgroup: number;
    readonly config: PagedAttentionConfig;
    readonly layout: KvCacheLayout;
  },
  base: typeof kernel,
): void {
  const fields: [string, unknown, unknown][] = [
    ['kernel', kernel.kernel, base.kernel],
    ['headsPerWorkgroup', kernel.headsPerWorkgroup, base.headsPerWorkgroup],
    ['numQHeads', kernel.config.numQHeads, base.config.numQHeads],
    ['numKvHeads', kernel.config.numKvHeads, base.config.numKvHeads],
    ['headDim', kernel.config.headDim, base.config.headDim],
    ['window', kernel.config.window, base.config.window],
    ['blockWords', kernel.layout.blockWords, base.layout.blockWords],
    ['blockSize', kernel.layout.blockSize, base.layout.blockSize],
  ];
  for (const [name, a, b] of fields) {
    if (a !== b) {
      throw new AttentionKernelError(
        'INVALID_ARGUMENT',
        `cannot share plans with a kernel of another ${name} (${String(a)} vs ${String(b)})`,
      );
    }
  }
}
