/// <reference types="@webgpu/types" />
import {
  type AttentionMassPlan,
  PAGED_ATTENTION_HEAD_DIMS,
  type PagedAttentionConfig,
  PagedAttentionMass,
  PagedDecodeAttention,
  PagedPrefillAttention,
  ropeTables,
  ShiftKeys,
  WriteKvCache,
} from '@kvasir/attention-kernels';
import { createGpu, type Gpu, type GpuBackendOption } from '@kvasir/gpu';
import {
  layerRopeConfig,
  layerWindow,
  type ModelConfig,
  type MoeConfig,
  ropeConfig,
  ropeQueryScale,
  usesLocalRope,
} from '../../config.js';
import { ModelError } from '../../errors.js';
import {
  checkHidden,
  type Executor,
  type ExecutorContext,
  sliceRole,
} from '../../execution/executor.js';
import type { NormalizedPlan } from '../../execution/forward-plan.js';
import { encodeBlockCopies, gpuKvBlockIo, type KvBlockIo } from '../../execution/kv-blocks.js';
import type { KvCacheSpec } from '../../execution/kv-cache.js';
import { addExpertOutputs, gatherExpertRows, routeExperts } from '../../execution/moe-routing.js';
import {
  type ExpertWeights,
  type LayerWeights,
  loadShardWeights,
  type MoeLayerWeights,
  type ShardWeights,
  type WeightAllocator,
} from '../../execution/weights.js';
import { DenseKernels, type DenseOp, type GpuWeight } from '../../kernels/dense-kernels.js';
import { softcapLogits } from '../../kernels/reference.js';
import { ropeKvWriteWgsl } from '../../kernels/rope-kv-write.wgsl.js';
import { type StoredFormat, weightRowBytes, weightWords } from '../../kernels/weight-format.js';

const STORAGE = 0x80 | 0x8 | 0x4; // STORAGE | COPY_DST | COPY_SRC
const UNIFORM = 0x40 | 0x8; // UNIFORM | COPY_DST

/**
 * Creates the WebGPU executor: acquires a device (or uses the given `Gpu`), streams the weights
 * onto it and allocates the per-layer caches. Returns undefined when no adapter exists and
 * WebGPU is not required (the caller falls back to the CPU).
 * @throws {ModelError} `BACKEND` when WebGPU is required but unavailable, or a cache layer
 *   exceeds the device's binding size.
 */
export async function createGpuExecutor(
  ctx: ExecutorContext,
  options: { gpu: unknown; required: boolean; adapter?: number },
): Promise<Executor | undefined> {
  const { reader, kv } = ctx;
  if (kv.groups) {
    // The paged WebGPU kernels take one block table per row: per-group tables are not wired yet.
    throw new ModelError(
      'INVALID_ARGUMENT',
      'KV cache groups (sliding-window layers holding only their window) are not supported on the webgpu backend yet: use whole-context KV there (kvasir --swa-full) or the cpu/wasm backend',
    );
  }
  let gpu: Gpu;
  const owned = options.gpu === undefined;
  if (options.gpu !== undefined) gpu = options.gpu as Gpu;
  else {
    try {
      gpu = await openWebGpu(options.adapter);
    } catch (cause) {
      if (ModelError.isInstance(cause)) throw cause;
      if (options.required) {
        throw new ModelError(
          'BACKEND',
          `no WebGPU device: ${cause instanceof Error ? cause.message : String(cause)}`,
          {
            cause,
          },
        );
      }
      return undefined;
    }
  }
  try {
    const device = gpu.device;
    const maxBinding = device.limits.maxStorageBufferBindingSize;
    if (kv.layerWords * 4 > maxBinding) {
      throw new ModelError(
        'BACKEND',
        `one layer's KV cache (${kv.layerWords * 4} bytes for ${kv.numBlocks} blocks) exceeds the device's storage binding limit of ${maxBinding} bytes; use fewer blocks`,
        { details: { numBlocks: kv.numBlocks, bytes: kv.layerWords * 4, maxBinding } },
      );
    }
    const c = reader.config;
    if (!PAGED_ATTENTION_HEAD_DIMS.includes(c.headDim)) {
      throw new ModelError(
        'INVALID_CONFIG',
        `no paged attention kernel for head dim ${c.headDim}; @kvasir/attention-kernels has head dims ${PAGED_ATTENTION_HEAD_DIMS.join(', ')}`,
        { details: { headDim: c.headDim } },
      );
    }
    const config = {
      numQHeads: c.numHeads,
      numKvHeads: c.numKvHeads,
      headDim: c.headDim,
      blockSize: kv.blockSize,
      format: kv.kvFormat,
      ...(c.attentionScale !== undefined ? { scale: c.attentionScale } : {}),
    };
    // The sliding-window layers' kernels, when this shard has such layers.
    const role = sliceRole(ctx.layers, c.numLayers);
    const window = Array.from({ length: role.count }, (_, l) =>
      layerWindow(c, role.first + l),
    ).find((w) => w !== null);
    const localConfig = window ? { ...config, window } : undefined;
    const attention: AttentionKernels = {
      config,
      decode: await PagedDecodeAttention.create(gpu, config),
      prefill: await PagedPrefillAttention.create(gpu, config),
      ...(localConfig
        ? {
            local: {
              config: localConfig,
              decode: await PagedDecodeAttention.create(gpu, localConfig),
              prefill: await PagedPrefillAttention.create(gpu, localConfig),
            },
          }
        : {}),
      // f32 and f16 rows are written by the fused RoPE + cache-write kernel.
      write:
        kv.format === 'f32' || kv.format === 'f16'
          ? undefined
          : await WriteKvCache.create(gpu, config),
    };
    const weights = await loadShardWeights(
      reader,
      gpuAllocator(device, maxBinding),
      ctx.weights,
      ctx.layers,
    );
    const sinks = c.attentionSinks
      ? await sinkAttention(gpu, weights.layers, (l) =>
          layerWindow(c, role.first + l) === null ? attention : (attention.local as AttentionSet),
        )
      : undefined;
    return new GpuForward(
      gpu,
      owned,
      c,
      weights,
      kv,
      sinks ? { ...attention, sinks } : attention,
      sliceRole(ctx.layers, c.numLayers),
    );
  } catch (e) {
    if (owned) gpu.destroy();
    throw e;
  }
}

/**
 * Each layer's attention kernels with its sinks baked in, encoding the plans of the set
 * (`setOf(l)`: the global or the sliding-window one) the layer belongs to.
 */
async function sinkAttention(
  gpu: Gpu,
  layers: readonly LayerWeights<GpuWeight>[],
  setOf: (l: number) => AttentionSet,
): Promise<(AttentionSet | undefined)[]> {
  const out: (AttentionSet | undefined)[] = [];
  for (const [l, lw] of layers.entries()) {
    if (!lw.sinks) {
      out.push(undefined);
      continue;
    }
    const base = setOf(l);
    const config = { ...base.config, sinks: Array.from(lw.sinks) };
    const decode = await PagedDecodeAttention.create(gpu, config, { kernel: base.decode.kernel });
    const prefill = await PagedPrefillAttention.create(gpu, config, {
      kernel: base.prefill.kernel,
    });
    decode.acceptPlansOf(base.decode);
    prefill.acceptPlansOf(base.prefill);
    out.push({ config, decode, prefill });
  }
  return out;
}

/** The platform's native WebGPU backend, then OpenGL ES: the numbering of `webgpu:N`. */
function adapterOrder(): readonly GpuBackendOption[] {
  const platform = (globalThis as { process?: { platform?: string } }).process?.platform;
  const native = platform === 'darwin' ? 'metal' : platform === 'win32' ? 'd3d12' : 'vulkan';
  return [native, 'opengles'];
}

/**
 * A device on adapter `index` (see `WEBGPU_ADAPTER_ORDER`: the backends that offer one,
 * native first), or on the adapter `createGpu` picks.
 * @throws {ModelError} `INVALID_ARGUMENT` naming how many adapters there are when `index` is
 *   past them; `createGpu`'s errors otherwise.
 */
export async function openWebGpu(index: number | undefined): Promise<Gpu> {
  if (index === undefined) return createGpu({ label: 'kvasir-model' });
  const found: string[] = [];
  for (const backend of adapterOrder()) {
    let gpu: Gpu;
    try {
      gpu = await createGpu({ label: `kvasir-model.${index}`, backend });
    } catch {
      continue;
    }
    if (found.length === index) return gpu;
    found.push(`${found.length}: ${gpu.describe()}`);
    gpu.destroy();
  }
  throw new ModelError(
    'INVALID_ARGUMENT',
    `webgpu:${index}: this machine has ${found.length} WebGPU adapter${found.length === 1 ? '' : 's'}${found.length > 0 ? ` (${found.join('; ')})` : ''}`,
    { details: { adapter: index, adapters: found.length } },
  );
}

function gpuAllocator(
  device: GPUDevice,
  maxBinding: number,
): WeightAllocator<GpuWeight, StoredFormat> {
  return (name, rows, cols, format, groupSize) => {
    // GGML blocks go up as the file has them; rows start at any byte, the loader's batches
    // at multiples of 4 rows, hence at word boundaries.
    const rowBytes = weightRowBytes(format, cols);
    const bytes = weightWords(format, rows, cols) * 4;
    if (bytes > maxBinding) {
      throw new ModelError(
        'BACKEND',
        `tensor ${name} (${bytes} bytes as ${format}) exceeds the device's storage binding limit of ${maxBinding} bytes`,
        { details: { tensor: name, bytes, maxBinding } },
      );
    }
    const data = device.createBuffer({ label: name, size: Math.max(16, bytes), usage: STORAGE });
    const gpr = format === 'int8' ? cols / groupSize : 0;
    const scales =
      format === 'int8'
        ? device.createBuffer({
            label: `${name}.scales`,
            size: Math.max(16, rows * gpr * 4),
            usage: STORAGE,
          })
        : undefined;
    return {
      write(rowStart, d, s) {
        const at = rowStart * rowBytes;
        const n = Math.min(d.byteLength, bytes - at);
        device.queue.writeBuffer(data, at, d.buffer, d.byteOffset, n);
        if (s && scales)
          device.queue.writeBuffer(
            scales,
            rowStart * gpr * 4,
            s.buffer,
            s.byteOffset,
            s.byteLength,
          );
      },
      finish: () => ({
        format,
        rows,
        cols,
        groupSize: format === 'int8' ? groupSize : 0,
        data,
        scales,
      }),
    };
  };
}

/** One configuration's paged attention kernels. */
interface AttentionSet {
  readonly config: PagedAttentionConfig;
  readonly decode: PagedDecodeAttention;
  readonly prefill: PagedPrefillAttention;
}

/**
 * `@kvasir/attention-kernels`' paged attention (and `local`, the sliding-window layers' own)
 * and, for quantized formats, its cache writer.
 */
interface AttentionKernels extends AttentionSet {
  readonly local?: AttentionSet;
  /**
   * Layers with attention sinks (gpt-oss), by local index: their own kernels (the sinks are
   * baked into the WGSL) that encode the plans of the set the layer belongs to.
   */
  readonly sinks?: readonly (AttentionSet | undefined)[];
  /** The quantizing cache writer, for formats the fused RoPE + write kernel does not encode. */
  readonly write: WriteKvCache | undefined;
}

/** A step's attention plan from `@kvasir/attention-kernels` (shared by every layer). */
type AttentionStep =
  | { kind: 'decode'; plan: ReturnType<PagedDecodeAttention['plan']> }
  | { kind: 'prefill'; plan: ReturnType<PagedPrefillAttention['plan']> };

/** Work recorded into the step's encoder right after layer `l`'s attention (attention mass). */
type AfterAttention = (
  enc: GPUCommandEncoder,
  l: number,
  query: GPUBuffer,
  cache: GPUBuffer,
) => void;

/** The step's attention plans: every layer's, and the sliding-window layers' when there are. */
interface AttentionSteps {
  readonly global: AttentionStep;
  readonly local: AttentionStep | undefined;
}

/**
 * Records a step into `enc`; returns the encoder the step ends in (another one when a
 * mixture-of-experts layer submitted the work so far to route its tokens on the host).
 */
type StepOps = (
  enc: GPUCommandEncoder,
  plan: NormalizedPlan,
  attn: AttentionSteps,
  after?: AfterAttention,
) => Promise<GPUCommandEncoder>;

/** One expert's rows of a step (buffers shared by every layer's expert of that index). */
interface ExpertScratch {
  /** Rows the buffers hold. */
  rows: number;
  xe: GPUBuffer;
  act: GPUBuffer;
  ye: GPUBuffer;
  /** Uniform: the expert's row count this step. */
  params: GPUBuffer;
  /** Each layer's matmuls of this expert over these buffers. */
  ops: Map<number, { gateUp: DenseOp; down: DenseOp }>;
}

/** What {@link GpuForward}'s `#extras` adds to a step. */
interface StepExtras {
  readonly after?: AfterAttention;
  /** After the submission: copies each asking row's mass into its `attentionMass`. */
  readonly readMass: () => Promise<void>;
  readonly release: () => void;
}

interface Scratch {
  tokens: number;
  logits: number;
  ropePositions: number;
  copies: number;
  ids: GPUBuffer;
  positions: GPUBuffer;
  slots: GPUBuffer;
  logitRows: GPUBuffer;
  x: GPUBuffer;
  xn: GPUBuffer;
  q: GPUBuffer;
  k: GPUBuffer;
  v: GPUBuffer;
  attn: GPUBuffer;
  act: GPUBuffer;
  /** Router logits of a mixture-of-experts layer (16 bytes without). */
  router: GPUBuffer;
  fin: GPUBuffer;
  logitsBuf: GPUBuffer;
  readback: GPUBuffer;
  /** The hidden states a shard before the last hands on (16 bytes on the last). */
  hiddenReadback: GPUBuffer;
  cos: GPUBuffer;
  sin: GPUBuffer;
  /** The sliding-window layers' own RoPE tables (16 bytes when they have none). */
  cosLocal: GPUBuffer;
  sinLocal: GPUBuffer;
  blockTmp: GPUBuffer;
}

/**
 * The forward pass on WebGPU: one command encoder and one compute pass per step, buffers
 * grown (never shrunk) to the largest step seen, launches and bind groups built once per
 * growth and reused, and only the asked logits rows read back.
 */
class GpuForward implements Executor {
  readonly #kernels: DenseKernels;
  readonly #device: GPUDevice;
  readonly #caches: GPUBuffer[];
  readonly #small = new Map<Float32Array, GPUBuffer>();
  readonly #tokParams: GPUBuffer;
  readonly #logitParams: GPUBuffer;
  #scratch: Scratch | undefined;
  readonly #expertBuffers: ExpertScratch[] = [];
  #ops: StepOps | undefined;
  #queue: Promise<unknown> = Promise.resolve();
  // Built on the first step that needs them (KV compression's key shifts and attention mass), so a
  // model that never compresses its cache compiles and binds nothing for them.
  #mass: Promise<PagedAttentionMass> | undefined;
  #shift: Promise<ShiftKeys> | undefined;
  readonly blocks: KvBlockIo;

  constructor(
    readonly gpu: Gpu,
    readonly ownsGpu: boolean,
    readonly config: ModelConfig,
    readonly weights: ShardWeights<GpuWeight>,
    readonly kv: KvCacheSpec,
    readonly attention: AttentionKernels,
    readonly role: ReturnType<typeof sliceRole>,
  ) {
    this.#device = gpu.device;
    this.#kernels = new DenseKernels(this.#device);
    this.#caches = Array.from({ length: role.count }, (_, l) =>
      this.#device.createBuffer({
        label: `kv-cache.${role.first + l}`,
        size: kv.layerWords * 4,
        usage: STORAGE,
      }),
    );
    const u = () => this.#device.createBuffer({ size: 16, usage: UNIFORM });
    this.#tokParams = u();
    this.#logitParams = u();
    this.blocks = gpuKvBlockIo(this.#device, kv, this.#caches);
  }

  #vec(v: Float32Array): GPUBuffer {
    let b = this.#small.get(v);
    if (!b) {
      b = this.#device.createBuffer({ size: Math.max(16, v.byteLength), usage: STORAGE });
      this.#device.queue.writeBuffer(b, 0, v.buffer, v.byteOffset, v.byteLength);
      this.#small.set(v, b);
    }
    return b;
  }

  #ensure(plan: NormalizedPlan): Scratch {
    const c = this.config;
    const need = {
      tokens: plan.numTokens,
      logits: Math.max(1, plan.logitsIndices.length),
      ropePositions: plan.ropePositions,
      copies: Math.max(1, plan.copies.length),
    };
    const s = this.#scratch;
    if (
      s &&
      s.tokens >= need.tokens &&
      s.logits >= need.logits &&
      s.ropePositions >= need.ropePositions &&
      s.copies >= need.copies
    ) {
      return s;
    }
    const grow = (cur: number | undefined, n: number) =>
      Math.max(n, cur === undefined ? n : cur * 2);
    const tokens = s && s.tokens >= need.tokens ? s.tokens : grow(s?.tokens, need.tokens);
    const logits = s && s.logits >= need.logits ? s.logits : grow(s?.logits, need.logits);
    const ropePositions =
      s && s.ropePositions >= need.ropePositions
        ? s.ropePositions
        : Math.min(
            c.maxPositionEmbeddings,
            grow(s?.ropePositions, Math.max(256, need.ropePositions)),
          );
    const copies = s && s.copies >= need.copies ? s.copies : grow(s?.copies, need.copies);
    if (s) for (const b of Object.values(s)) if (typeof b === 'object') (b as GPUBuffer).destroy();
    const dev = this.#device;
    const buf = (label: string, bytes: number) =>
      dev.createBuffer({ label, size: Math.max(16, bytes), usage: STORAGE });
    const d = c.headDim;
    const rope = ropeTables(ropeConfig(c, ropePositions));
    const localRope =
      c.localRopeTheta !== undefined
        ? ropeTables(layerRopeConfig(c, c.slidingWindowLayers?.[0] ?? 0, ropePositions))
        : undefined;
    const next: Scratch = {
      tokens,
      logits,
      ropePositions,
      copies,
      ids: buf('ids', tokens * 4),
      positions: buf('positions', tokens * 4),
      slots: buf('slots', tokens * 4),
      logitRows: buf('logitRows', logits * 4),
      x: buf('x', tokens * c.hiddenSize * 4),
      xn: buf('xn', tokens * c.hiddenSize * 4),
      q: buf('q', tokens * c.numHeads * d * 4),
      k: buf('k', tokens * c.numKvHeads * d * 4),
      v: buf('v', tokens * c.numKvHeads * d * 4),
      attn: buf('attn', tokens * c.numHeads * d * 4),
      act: buf('act', tokens * c.intermediateSize * 4),
      router: buf('router', tokens * (c.moe?.numExperts ?? 0) * 4),
      fin: buf('fin', logits * c.hiddenSize * 4),
      logitsBuf: buf('logits', this.role.head ? logits * c.vocabSize * 4 : 16),
      readback: dev.createBuffer({
        label: 'readback',
        size: this.role.head ? logits * c.vocabSize * 4 : 16,
        usage: 0x1 | 0x8,
      }),
      hiddenReadback: dev.createBuffer({
        label: 'hidden-readback',
        size: this.role.head ? 16 : tokens * c.hiddenSize * 4,
        usage: 0x1 | 0x8,
      }),
      cos: buf('cos', rope.cos.byteLength),
      sin: buf('sin', rope.sin.byteLength),
      cosLocal: buf('cos-local', localRope?.cos.byteLength ?? 16),
      sinLocal: buf('sin-local', localRope?.sin.byteLength ?? 16),
      blockTmp: buf('blockTmp', copies * this.kv.blockWords * 4),
    };
    dev.queue.writeBuffer(next.cos, 0, rope.cos);
    dev.queue.writeBuffer(next.sin, 0, rope.sin);
    if (localRope) {
      dev.queue.writeBuffer(next.cosLocal, 0, localRope.cos);
      dev.queue.writeBuffer(next.sinLocal, 0, localRope.sin);
    }
    this.#scratch = next;
    this.#ops = this.#buildOps(next);
    return next;
  }

  #buildOps(s: Scratch): StepOps {
    const c = this.config;
    const k = this.#kernels;
    const w = this.weights;
    const kvShape = {
      numHeads: c.numHeads,
      numKvHeads: c.numKvHeads,
      headDim: c.headDim,
      blockSize: this.kv.blockSize,
      f16: this.kv.format === 'f16',
      rowWords: this.kv.rowWords,
      slabWords: this.kv.slabWords,
      blockWords: this.kv.blockWords,
      ...(c.rotaryDim !== undefined ? { rotaryDim: c.rotaryDim } : {}),
      qScale: ropeQueryScale(c),
    };
    const writer = this.attention.write;
    const ropePipe = k.pipeline(ropeKvWriteWgsl({ ...kvShape, write: writer === undefined }));
    // NoPE layers: the fused write without rotation; with a separate writer, no kernel at all.
    const nopePipe =
      writer === undefined ? k.pipeline(ropeKvWriteWgsl({ ...kvShape, rotate: false })) : undefined;
    // By the executor's own layer index (`role.first + l` is the model's).
    const nope = (l: number) => c.noRopeLayers?.includes(this.role.first + l) ?? false;
    const bind = (p: GPUComputePipeline, bufs: GPUBuffer[]) =>
      this.#device.createBindGroup({
        layout: p.getBindGroupLayout(0),
        entries: bufs.map((buffer, binding) => ({ binding, resource: { buffer } })),
      });
    const tp = this.#tokParams;
    const role = this.role;
    const embed = role.embed
      ? k.embedding({
          ids: s.ids,
          table: w.embed as GpuWeight,
          y: s.x,
          ...(c.embeddingScale !== undefined ? { scale: c.embeddingScale } : {}),
        })
      : undefined;
    const gate = c.mlpActivation === 'gelu-tanh' ? 'geglu' : 'swiglu';
    // With a sandwich norm, a projection is stored into xn (free by then), normalized and
    // added into x; otherwise the residual add is fused into the matmul.
    const project = (
      x: GPUBuffer,
      wt: GpuWeight,
      norm: Float32Array | undefined,
      bias: GPUBuffer | undefined,
    ) => {
      if (!norm) {
        const op = k.matmul({ x, w: wt, y: s.x, params: tp, bias, epilogue: 'residual' });
        return [op];
      }
      return [
        k.matmul({ x, w: wt, y: s.xn, params: tp, bias }),
        k.rmsNorm({
          x: s.xn,
          weight: this.#vec(norm),
          y: s.x,
          h: c.hiddenSize,
          eps: c.rmsNormEps,
          add: true,
        }),
      ];
    };
    const layers = w.layers.map((lw, l) => {
      const cache = this.#caches[l] as GPUBuffer;
      const local = layerWindow(c, role.first + l) !== null;
      const localRope = usesLocalRope(c, role.first + l);
      const cos = localRope ? s.cosLocal : s.cos;
      const sin = localRope ? s.sinLocal : s.sin;
      const opt = (v: Float32Array | undefined) => (v ? this.#vec(v) : undefined);
      return {
        norm1: k.rmsNorm({
          x: s.x,
          weight: this.#vec(lw.inputNorm),
          y: s.xn,
          h: c.hiddenSize,
          eps: c.rmsNormEps,
        }),
        q: k.matmul({ x: s.xn, w: lw.q, y: s.q, params: tp, bias: opt(lw.qBias) }),
        k: k.matmul({ x: s.xn, w: lw.k, y: s.k, params: tp, bias: opt(lw.kBias) }),
        v: k.matmul({ x: s.xn, w: lw.v, y: s.v, params: tp, bias: opt(lw.vBias) }),
        qNorm: lw.qNorm
          ? k.headRmsNorm({
              x: s.q,
              weight: this.#vec(lw.qNorm),
              d: c.headDim,
              heads: c.numHeads,
              eps: c.rmsNormEps,
            })
          : undefined,
        kNorm: lw.kNorm
          ? k.headRmsNorm({
              x: s.k,
              weight: this.#vec(lw.kNorm),
              d: c.headDim,
              heads: c.numKvHeads,
              eps: c.rmsNormEps,
            })
          : undefined,
        ropePipe: nope(l) ? nopePipe : ropePipe,
        rope: writer
          ? this.#device.createBindGroup({
              layout: ropePipe.getBindGroupLayout(0),
              entries: (
                [
                  [0, s.q],
                  [1, s.k],
                  [4, cos],
                  [5, sin],
                  [6, s.positions],
                ] as const
              ).map(([binding, buffer]) => ({ binding, resource: { buffer } })),
            })
          : bind(nope(l) ? (nopePipe as GPUComputePipeline) : ropePipe, [
              s.q,
              s.k,
              s.v,
              cache,
              cos,
              sin,
              s.positions,
              s.slots,
            ]),
        local,
        o: project(s.attn, lw.o, lw.attnOutNorm, opt(lw.oBias)),
        norm2: k.rmsNorm({
          x: s.x,
          weight: this.#vec(lw.postNorm),
          y: s.xn,
          h: c.hiddenSize,
          eps: c.rmsNormEps,
        }),
        router: lw.moe
          ? k.matmul({
              x: s.xn,
              w: lw.moe.router,
              y: s.router,
              params: tp,
              bias: opt(lw.moe.routerBias),
            })
          : undefined,
        gateUp: lw.gateUp
          ? k.matmul({ x: s.xn, w: lw.gateUp, y: s.act, params: tp, epilogue: gate })
          : undefined,
        down: lw.down ? project(s.act, lw.down, lw.mlpOutNorm, undefined) : undefined,
      };
    });
    const finalNorm = role.head
      ? k.rmsNorm({
          x: s.x,
          weight: this.#vec(w.finalNorm as Float32Array),
          y: s.fin,
          h: c.hiddenSize,
          eps: c.rmsNormEps,
          rowIndex: s.logitRows,
        })
      : undefined;
    const head = role.head
      ? k.matmul({ x: s.fin, w: w.lmHead as GpuWeight, y: s.logitsBuf, params: this.#logitParams })
      : undefined;
    return async (enc, plan, steps, after) => {
      const t = plan.numTokens;
      let pass = enc.beginComputePass({ label: 'kvasir-forward' });
      embed?.encode(pass, t);
      for (const [l, L] of layers.entries()) {
        L.norm1.encode(pass, t);
        L.q.encode(pass, t);
        L.k.encode(pass, t);
        L.v.encode(pass, t);
        L.qNorm?.encode(pass, t);
        L.kNorm?.encode(pass, t);
        if (L.ropePipe) {
          pass.setPipeline(L.ropePipe);
          pass.setBindGroup(0, L.rope);
          pass.dispatchWorkgroups(t);
        }
        {
          // The attention kernels record their own passes into the same encoder.
          pass.end();
          const cache = this.#caches[l] as GPUBuffer;
          writer?.encode(enc, {
            key: s.k,
            value: s.v,
            slotMapping: s.slots,
            kvCache: cache,
            numTokens: t,
          });
          const io = { query: s.q, kvCache: cache, output: s.attn };
          const set =
            this.attention.sinks?.[l] ??
            (L.local ? (this.attention.local as AttentionSet) : this.attention);
          const attnStep = L.local ? (steps.local as AttentionStep) : steps.global;
          if (attnStep.kind === 'decode') set.decode.encode(enc, { ...io, plan: attnStep.plan });
          else set.prefill.encode(enc, { ...io, plan: attnStep.plan });
          after?.(enc, l, s.q, cache);
          pass = enc.beginComputePass({ label: 'kvasir-forward' });
        }
        for (const op of L.o) op.encode(pass, t);
        L.norm2.encode(pass, t);
        L.gateUp?.encode(pass, t);
        for (const op of L.down ?? []) op.encode(pass, t);
        if (L.router) {
          L.router.encode(pass, t);
          pass.end();
          enc = await this.#runExperts(enc, l, s, t);
          pass = enc.beginComputePass({ label: 'kvasir-forward' });
        }
      }
      const n = plan.logitsIndices.length;
      finalNorm?.encode(pass, n);
      head?.encode(pass, n);
      pass.end();
      return enc;
    };
  }

  /**
   * Layer `l`'s experts, after its router recorded into `enc`: the work so far is submitted,
   * the router's logits read back and the tokens grouped by expert on the host; each chosen
   * expert multiplies its tokens' rows on the device (straight from its blocks), and their
   * weighted sum is added to the residual on the host. Returns a fresh encoder for the rest.
   */
  async #runExperts(
    enc: GPUCommandEncoder,
    l: number,
    s: Scratch,
    t: number,
  ): Promise<GPUCommandEncoder> {
    const c = this.config;
    const moe = c.moe as MoeConfig;
    const lw = this.weights.layers[l] as LayerWeights<GpuWeight>;
    const experts = (lw.moe as MoeLayerWeights<GpuWeight>).experts;
    const h = c.hiddenSize;
    const gpu = this.gpu;
    gpu.submit(enc);
    const [logits, xn, x] = await Promise.all([
      gpu.readBuffer(s.router, 0, t * moe.numExperts * 4),
      gpu.readBuffer(s.xn, 0, t * h * 4),
      gpu.readBuffer(s.x, 0, t * h * 4),
    ]);
    const route = routeExperts(new Float32Array(logits), t, moe);
    const rows = t * moe.numExpertsPerToken;
    const xe = new Float32Array(rows * h);
    gatherExpertRows(route, new Float32Array(xn), h, xe);
    const q = this.#device.queue;
    const next = this.#device.createCommandEncoder({ label: 'kvasir-experts' });
    const pass = next.beginComputePass({ label: 'kvasir-experts' });
    const active: [ExpertScratch, number, number][] = [];
    for (let e = 0; e < moe.numExperts; e++) {
      const start = route.offsets[e] as number;
      const n = (route.offsets[e + 1] as number) - start;
      if (n === 0) continue;
      const es = this.#expertScratch(e, n);
      let ops = es.ops.get(l);
      if (!ops) {
        const ex = experts[e] as ExpertWeights<GpuWeight>;
        const k = this.#kernels;
        ops = {
          gateUp: k.matmul({
            x: es.xe,
            w: ex.gateUp,
            y: es.act,
            params: es.params,
            epilogue: moe.activation === 'swiglu-oai' ? 'swiglu-oai' : 'swiglu',
            ...(ex.gateUpBias ? { bias: this.#vec(ex.gateUpBias) } : {}),
          }),
          down: k.matmul({
            x: es.act,
            w: ex.down,
            y: es.ye,
            params: es.params,
            ...(ex.downBias ? { bias: this.#vec(ex.downBias) } : {}),
          }),
        };
        es.ops.set(l, ops);
      }
      q.writeBuffer(es.xe, 0, xe, start * h, n * h);
      q.writeBuffer(es.params, 0, Uint32Array.of(n, 0, 0, 0));
      ops.gateUp.encode(pass, n);
      ops.down.encode(pass, n);
      active.push([es, start, n]);
    }
    pass.end();
    gpu.submit(next);
    const y = new Float32Array(rows * h);
    const outs = await Promise.all(active.map(([es, , n]) => gpu.readBuffer(es.ye, 0, n * h * 4)));
    for (const [i, [, start]] of active.entries())
      y.set(new Float32Array(outs[i] as ArrayBuffer), start * h);
    const residual = new Float32Array(x);
    addExpertOutputs(route, y, h, residual);
    q.writeBuffer(s.x, 0, residual);
    return this.#device.createCommandEncoder({ label: 'kvasir-forward' });
  }

  /** Expert `e`'s buffers, grown to hold `rows` rows (its matmuls rebuilt when they grow). */
  #expertScratch(e: number, rows: number): ExpertScratch {
    const have = this.#expertBuffers[e];
    if (have && have.rows >= rows) return have;
    if (have) for (const b of [have.xe, have.act, have.ye, have.params]) b.destroy();
    const c = this.config;
    const ff = (c.moe as MoeConfig).expertIntermediateSize;
    const cap = Math.max(rows, 2 * (have?.rows ?? 0), 4);
    const dev = this.#device;
    const buf = (label: string, bytes: number) =>
      dev.createBuffer({ label, size: Math.max(16, bytes), usage: STORAGE });
    const es: ExpertScratch = {
      rows: cap,
      xe: buf(`expert.${e}.x`, cap * c.hiddenSize * 4),
      act: buf(`expert.${e}.act`, cap * ff * 4),
      ye: buf(`expert.${e}.y`, cap * c.hiddenSize * 4),
      params: dev.createBuffer({ size: 16, usage: UNIFORM }),
      ops: new Map(),
    };
    this.#expertBuffers[e] = es;
    return es;
  }

  /** Plans the step's attention once for all layers (decode kernel for pure-decode steps). */
  #attentionStep(plan: NormalizedPlan, a: AttentionSet): AttentionStep {
    let pureDecode = plan.numTokens === plan.numSeqs;
    for (let r = 0; pureDecode && r < plan.numSeqs; r++) {
      pureDecode = plan.queryLens[r] === 1 && plan.queryStarts[r] === r;
    }
    const batch = {
      blockTables: plan.blockTables,
      contextLens: plan.contextLens,
      numSeqs: plan.numSeqs,
      maxBlocksPerSeq: plan.maxBlocksPerSeq,
    };
    if (pureDecode) return { kind: 'decode', plan: a.decode.plan(batch) };
    return {
      kind: 'prefill',
      plan: a.prefill.plan({
        ...batch,
        queryStarts: plan.queryStarts,
        queryLens: plan.queryLens,
        numTokens: plan.numTokens,
      }),
    };
  }

  forward(plan: NormalizedPlan, hidden?: Float32Array): Promise<Float32Array> {
    // Steps share scratch and read-back buffers: run them one at a time.
    const run = this.#queue.then(() => this.#step(plan, hidden));
    this.#queue = run.catch(() => undefined);
    return run;
  }

  async #step(plan: NormalizedPlan, hidden?: Float32Array): Promise<Float32Array> {
    const role = this.role;
    const h = this.config.hiddenSize;
    const input = role.embed ? undefined : checkHidden(hidden, plan.numTokens, h);
    const s = this.#ensure(plan);
    const ops = this.#ops as StepOps;
    const dev = this.#device;
    const qw = dev.queue;
    const t = plan.numTokens;
    const n = role.head ? plan.logitsIndices.length : 0;
    if (input) qw.writeBuffer(s.x, 0, input);
    qw.writeBuffer(s.ids, 0, plan.tokenIds);
    qw.writeBuffer(s.positions, 0, plan.positions);
    qw.writeBuffer(s.slots, 0, plan.slotMapping);
    if (n > 0) qw.writeBuffer(s.logitRows, 0, plan.logitsIndices);
    qw.writeBuffer(this.#tokParams, 0, Uint32Array.of(t, 0, 0, 0));
    qw.writeBuffer(this.#logitParams, 0, Uint32Array.of(n, 0, 0, 0));
    dev.pushErrorScope('validation');
    dev.pushErrorScope('out-of-memory');
    let enc = dev.createCommandEncoder({ label: 'kvasir-forward' });
    encodeBlockCopies(enc, this.#caches, this.kv.blockWords * 4, plan.copies, s.blockTmp);
    const local = this.attention.local;
    const steps: AttentionSteps = {
      global: this.#attentionStep(plan, this.attention),
      local: local ? this.#attentionStep(plan, local) : undefined,
    };
    const releaseSteps = () => {
      steps.global.plan.release();
      steps.local?.plan.release();
    };
    let extra: StepExtras | undefined;
    try {
      extra = await this.#extras(plan, s, enc);
      enc = await ops(enc, plan, steps, extra?.after);
    } catch (e) {
      releaseSteps();
      extra?.release();
      if (e instanceof ModelError) throw e;
      throw new ModelError(
        'BACKEND',
        `encoding the forward step failed: ${e instanceof Error ? e.message : String(e)}`,
        {
          cause: e,
        },
      );
    }
    const bytes = n * this.config.vocabSize * 4;
    if (n > 0) enc.copyBufferToBuffer(s.logitsBuf, 0, s.readback, 0, bytes);
    const hiddenBytes = role.head ? 0 : t * h * 4;
    if (hiddenBytes > 0) enc.copyBufferToBuffer(s.x, 0, s.hiddenReadback, 0, hiddenBytes);
    this.gpu.submit(enc);
    const oom = await dev.popErrorScope();
    const invalid = await dev.popErrorScope();
    const err = oom ?? invalid;
    try {
      if (err) throw new ModelError('BACKEND', `WebGPU error in forward: ${err.message}`);
      await extra?.readMass();
      if (hiddenBytes > 0) {
        await s.hiddenReadback.mapAsync(0x1, 0, hiddenBytes);
        const out = new Float32Array(s.hiddenReadback.getMappedRange(0, hiddenBytes).slice(0));
        s.hiddenReadback.unmap();
        return out;
      }
      if (n === 0) {
        await qw.onSubmittedWorkDone();
        return new Float32Array(0);
      }
      await s.readback.mapAsync(0x1, 0, bytes);
      const out = new Float32Array(s.readback.getMappedRange(0, bytes).slice(0));
      s.readback.unmap();
      if (this.config.finalLogitSoftcap !== undefined) {
        softcapLogits(out, this.config.finalLogitSoftcap);
      }
      return out;
    } finally {
      releaseSteps();
      extra?.release();
    }
  }

  /**
   * KV compression's optional work of a step: key shifts recorded now (after the copies, before the
   * layers), attention mass as a hook after each layer's attention and a read-back after the
   * step. Undefined, and nothing recorded, when the plan asks for neither.
   */
  async #extras(
    plan: NormalizedPlan,
    s: Scratch,
    enc: GPUCommandEncoder,
  ): Promise<StepExtras | undefined> {
    const wantsMass = plan.massQueries.some((m) => m > 0);
    if (plan.keyShifts.length === 0 && !wantsMass) return undefined;
    const gpu = this.gpu;
    const owned: GPUBuffer[] = [];
    let massPlan: AttentionMassPlan | undefined;
    const release = () => {
      massPlan?.release();
      for (const b of owned) gpu.releaseBuffer(b);
    };
    try {
      if (plan.keyShifts.length > 0) {
        this.#shift ??= ShiftKeys.create(gpu, {
          ...this.attention.config,
          // The step's own tables (grown to cover every |delta|) are passed at encode.
          rope: ropeConfig(this.config, 1),
        });
        const shift = await this.#shift;
        const shifts = shift.upload(plan.keyShifts);
        owned.push(shifts);
        // A NoPE layer's keys carry no position: nothing to shift.
        const noRope = this.config.noRopeLayers ?? [];
        const first = this.role.first;
        for (const [l, cache] of this.#caches.entries()) {
          if (noRope.includes(first + l)) continue;
          const local = usesLocalRope(this.config, first + l);
          shift.encode(enc, {
            kvCache: cache,
            shifts,
            numShifts: plan.keyShifts.length,
            shiftsHost: plan.keyShifts,
            ropeTables: {
              cos: local ? s.cosLocal : s.cos,
              sin: local ? s.sinLocal : s.sin,
              maxPosition: s.ropePositions,
            },
          });
        }
      }
      if (!wantsMass) return { release, readMass: async () => {} };
      this.#mass ??= PagedAttentionMass.create(gpu, this.attention.config);
      const mass = await this.#mass;
      const mp = mass.plan({
        blockTables: plan.blockTables,
        queryStarts: plan.queryStarts,
        queryLens: plan.queryLens,
        contextLens: plan.contextLens,
        massQueries: plan.massQueries,
        numSeqs: plan.numSeqs,
        maxBlocksPerSeq: plan.maxBlocksPerSeq,
        numTokens: plan.numTokens,
      });
      massPlan = mp;
      // Created zeroed: the layers add into it.
      const massOut = gpu.storageBuffer(plan.numSeqs * plan.maxBlocksPerSeq * 4, 'attention-mass');
      owned.push(massOut);
      return {
        release,
        after: (e, _l, query, cache) =>
          mass.encode(e, { plan: mp, query, kvCache: cache, massOut }),
        readMass: async () => {
          const all = new Float32Array(await gpu.readBuffer(massOut));
          for (let r = 0; r < plan.numSeqs; r++) {
            const out = plan.massOut[r];
            if (out === undefined) continue;
            const need = Math.ceil((plan.contextLens[r] as number) / this.kv.blockSize);
            const at = r * plan.maxBlocksPerSeq;
            out.set(all.subarray(at, at + need));
          }
        },
      };
    } catch (e) {
      release();
      throw e;
    }
  }

  async destroy(): Promise<void> {
    await this.#queue;
    (await this.#shift?.catch(() => undefined))?.destroy();
    if (this.ownsGpu) {
      this.gpu.destroy();
      return;
    }
    for (const b of this.#caches) b.destroy();
    for (const b of this.#small.values()) b.destroy();
    const s = this.#scratch;
    if (s) for (const b of Object.values(s)) if (typeof b === 'object') (b as GPUBuffer).destroy();
    const ws = this.weights;
    const mats = [
      ws.embed,
      ws.lmHead,
      ...ws.layers.flatMap((l) => [
        l.q,
        l.k,
        l.v,
        l.o,
        l.gateUp,
        l.down,
        l.moe?.router,
        ...(l.moe?.experts.flatMap((x) => [x.gateUp, x.down]) ?? []),
      ]),
    ];
    for (const es of this.#expertBuffers)
      for (const b of [es.xe, es.act, es.ye, es.params]) b.destroy();
    for (const m of new Set(mats)) {
      if (m === undefined) continue;
      m.data.destroy();
      m.scales?.destroy();
    }
  }
}
