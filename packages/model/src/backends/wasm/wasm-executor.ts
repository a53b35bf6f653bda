import {
  type RopeConfig,
  type RopeTables,
  ropeTables,
  shiftKeysReference,
} from '@kvasir/attention-kernels';
import {
  layerRopeConfig,
  layerWindow,
  type ModelConfig,
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
import { copyHostBlocks, cpuKvBlockIo } from '../../execution/kv-blocks.js';
import type { KvCacheSpec } from '../../execution/kv-cache.js';
import { layerKv } from '../../execution/kv-groups.js';
import { addExpertOutputs, gatherExpertRows, routeExperts } from '../../execution/moe-routing.js';
import {
  type LayerWeights,
  loadShardWeights,
  type ShardWeights,
  sliceWeightBytes,
} from '../../execution/weights.js';
import { softcapLogits } from '../../kernels/reference.js';
import { isGgmlFormat } from '../../kernels/weight-format.js';
import { defaultThreadCount } from './thread-count.js';
import type { WasmArena } from './wasm-arena.js';
import { AttentionMass } from './wasm-attention-mass.js';
import type { KernelsBuild } from './wasm-module.js';
import {
  EpilogueCode,
  f32Word,
  KV_MAX_HEAD_DIM,
  KvCode,
  Op,
  type ProgramBuilder,
  quantizedRowBytes,
} from './wasm-program.js';
import { createWasmRuntime, type WasmOpProfile, type WasmRuntime } from './wasm-runtime.js';
import { type WasmWeight, wasmAllocator, weightArgs } from './wasm-weights.js';

/** Options of {@link createWasmExecutor}. */
export interface WasmExecutorOptions {
  /** Threads (the caller's included); default: the machine's physical cores. */
  readonly threads?: number;
  /**
   * When set, each step runs one op at a time and adds each op's time here (benchmarks: a
   * per-op profile; it costs a wake-up per op).
   */
  readonly profile?: WasmOpProfile;
  /** The kernels' build (default: `relaxed` where the runtime has relaxed SIMD). */
  readonly kernels?: KernelsBuild;
}

/** What a wasm executor reports about itself (for banners and benchmarks). */
export interface WasmExecutorInfo {
  readonly threads: number;
  readonly simd: string;
  /** Bytes of wasm memory in use. */
  readonly memoryBytes: number;
}

/** An {@link Executor} on the wasm backend, with what it runs on. */
export interface WasmExecutor extends Executor {
  readonly info: WasmExecutorInfo;
}

// Per-thread matmul scratch, f32 words per input column: a 4-row f32 weight tile, or for GGML
// blocks a token block of x in int16 and one unpacked weight row (GGML_SCRATCH_FLOATS_PER_COL
// of c/ggml-matmul.h).
const MATMUL_SCRATCH_PER_COL = 11;
// Tokens per query tile of prefill attention (attention.c's QT): its scratch is sized for them.
const ATTENTION_QUERY_TILE = 4;
// Token rows from which a step quantizes the GGML matmuls' activations in an op of its own,
// shared by every thread (fewer: each thread's matmul quantizes them, no barrier).
const SHARED_QUANTIZE_TOKENS = 4;
// Tokens the step buffers hold before they are reallocated larger.
const INITIAL_TOKENS = 64;
// Positions of the first RoPE tables (they grow with the longest position seen).
const INITIAL_ROPE_POSITIONS = 4096;

/**
 * The wasm backend: WebAssembly SIMD128 kernels on worker threads over one shared memory that
 * holds the weights (streamed in from the checkpoint), the paged KV cache (the layout every
 * backend shares, so blocks move between backends) and the step's activations.
 *
 * Every KV format is read and written in place by the kernels (c/kv-formats.h), bit for bit
 * the bytes the CPU backend writes.
 *
 * @throws {ModelError} `INVALID_CONFIG` when the model does not fit wasm32's 4 GiB (the message
 *   names the limit and what the model needs), or for a rotated KV format (int8-h8,
 *   int4-g32-h32) with a head dim above 512; `BACKEND` without SIMD128 or shared memory;
 *   reader errors.
 */
export async function createWasmExecutor(
  ctx: ExecutorContext,
  options: WasmExecutorOptions = {},
): Promise<WasmExecutor> {
  const { reader, kv } = ctx;
  const c = reader.config;
  if (kv.kvFormat.rotation !== undefined && c.headDim > KV_MAX_HEAD_DIM) {
    throw new ModelError(
      'INVALID_CONFIG',
      `KV format ${kv.format} on the wasm backend supports head dims up to ${KV_MAX_HEAD_DIM}; this model's is ${c.headDim}.`,
    );
  }
  const threads = options.threads ?? defaultThreadCount();
  const half = c.headDim / 2;
  const ropePositions = Math.min(c.maxPositionEmbeddings, INITIAL_ROPE_POSITIONS);
  const role = sliceRole(ctx.layers, c.numLayers);
  if (kv.groups && role.count !== c.numLayers) {
    throw new ModelError(
      'INVALID_ARGUMENT',
      'KV cache groups need the whole model on one device (a layer slice was given)',
    );
  }
  const reserve =
    sliceWeightBytes(reader, ctx.weights, ctx.layers) +
    (kv.groups ? kv.numLayers : role.count) * kv.layerWords * 4 +
    2 * ropePositions * half * 4 +
    stepBytes(c, INITIAL_TOKENS) +
    threads * 128 * 1024;
  const rt = await createWasmRuntime({
    build: options.kernels,
    threads,
    reserveBytes: reserve,
    what:
      role.count === c.numLayers
        ? `this model (${c.numLayers} layers, hidden ${c.hiddenSize}, ${kv.numBlocks} KV blocks of ${kv.format})`
        : `layers ${role.first}-${role.first + role.count - 1} of this model (hidden ${c.hiddenSize}, ${kv.numBlocks} KV blocks of ${kv.format})`,
  });
  try {
    const weights = await loadShardWeights(
      reader,
      wasmAllocator(rt.arena),
      ctx.weights,
      ctx.layers,
    );
    const forward = new WasmForward(rt, c, kv, weights, role, options.profile);
    return {
      forward: async (plan, hidden) => forward.forward(plan, hidden),
      blocks: cpuKvBlockIo(kv, forward.caches),
      destroy: () => rt.close(),
      get info() {
        return {
          threads: rt.pool.threads,
          simd: rt.build === 'relaxed' ? 'simd128, relaxed simd (int8 dot products)' : 'simd128',
          memoryBytes: rt.arena.top,
        };
      },
    };
  } catch (e) {
    await rt.close();
    throw e;
  }
}

/** Bytes of the per-step buffers for `t` tokens. */
function stepBytes(c: ModelConfig, t: number): number {
  const d = c.headDim;
  const floats =
    t * (2 * c.hiddenSize + 2 * c.numHeads * d + 2 * c.numKvHeads * d + c.intermediateSize);
  return (floats + moeStepFloats(c, t)) * 4 + t * 6 * 4;
}

/**
 * Floats of a mixture of experts' per-step buffers: router logits, and per grouped row (a
 * token's input to one of its experts) its input, activation, output and quantized input.
 */
function moeStepFloats(c: ModelConfig, t: number): number {
  const m = c.moe;
  if (!m) return 0;
  const rows = t * m.numExpertsPerToken;
  const h = c.hiddenSize;
  const ff = m.expertIntermediateSize;
  return t * m.numExperts + rows * (2 * h + ff) + (rows * quantizedRowBytes(Math.max(h, ff))) / 4;
}

/** The widest input of any matmul of the model (what the matmul scratch is sized by). */
function matmulWidth(c: ModelConfig): number {
  return Math.max(
    c.hiddenSize,
    c.intermediateSize,
    c.numHeads * c.headDim,
    c.moe?.expertIntermediateSize ?? 0,
  );
}

/** Per-step buffers for up to `tokens` tokens (byte offsets). */
interface StepBuffers {
  readonly tokens: number;
  readonly ids: number;
  readonly positions: number;
  readonly slots: number;
  readonly tokSeq: number;
  readonly x: number;
  readonly xn: number;
  readonly q: number;
  readonly k: number;
  readonly v: number;
  readonly attn: number;
  readonly act: number;
  /** Activation rows quantized for the GGML matmuls (quantizedRowBytes of the widest input). */
  readonly xq: number;
  /** Mixture of experts (0 without): router logits, grouped rows' inputs, activations, outputs, quantized inputs. */
  readonly router: number;
  readonly xe: number;
  readonly eact: number;
  readonly ye: number;
  readonly xeq: number;
}

/** Buffers whose size follows the plan's sequences, rows and context. */
interface PlanBuffers {
  readonly seqs: number;
  readonly blocks: number;
  readonly rows: number;
  readonly context: number;
  readonly queryStarts: number;
  readonly queryLens: number;
  readonly contextLens: number;
  readonly tables: number;
  readonly logitRows: number;
  readonly finalNorm: number;
  readonly logits: number;
  /** Per-thread scratch: the matmul's (MATMUL_SCRATCH_PER_COL), then attention's. */
  readonly scratch: number;
  readonly scratchStride: number;
  /** Attention score floats per query head in the scratch (> the longest context). */
  readonly scoreStride: number;
}

/** Host-side norms and biases copied into wasm memory. */
interface LayerVectors {
  readonly inputNorm: number;
  readonly postNorm: number;
  readonly qBias: number;
  readonly kBias: number;
  readonly vBias: number;
  readonly oBias: number;
  /** Q/K per-head norm weights (0 without `qkNorm`). */
  readonly qNorm: number;
  readonly kNorm: number;
  /** Sandwich norms of attention's and the MLP's outputs (0 without them). */
  readonly attnOutNorm: number;
  readonly mlpOutNorm: number;
  /** Attention-sink logits per query head (0 without `attentionSinks`). */
  readonly sinks: number;
  /** A mixture of experts' router bias and each expert's gate/up and down biases (0: none). */
  readonly routerBias: number;
  readonly expertBiases: readonly { readonly gateUp: number; readonly down: number }[];
}

/** RoPE tables in wasm memory and on the host (for key shifts). */
interface RopeSet {
  readonly cos: number;
  readonly sin: number;
  readonly host: { config: RopeConfig; tables: RopeTables };
}

/** One forward step as a single kernel program over the wasm memory. */
class WasmForward {
  readonly caches: Uint32Array[];
  readonly #rt: WasmRuntime;
  readonly #arena: WasmArena;
  readonly #c: ModelConfig;
  readonly #kv: KvCacheSpec;
  readonly #w: ShardWeights<WasmWeight>;
  readonly #role: ReturnType<typeof sliceRole>;
  readonly #vectors: LayerVectors[];
  readonly #finalNorm: number;
  readonly #cachePtrs: number[];
  #rope = { cos: 0, sin: 0, positions: 0 };
  /** The same tables on the host, for key shifts. */
  #ropeHost: { config: RopeConfig; tables: RopeTables } | undefined;
  /** The sliding-window layers' own RoPE, when the config gives them one. */
  #localRope: RopeSet | undefined;
  readonly #mass: AttentionMass;
  /**
   * The layers with RoPE (NoPE layers' keys never shift) by the RoPE they take (the global one,
   * then the sliding-window layers' own): local indices and their cache addresses' table, for
   * the key-shift op.
   */
  readonly #shiftGroups: { readonly layers: number[]; readonly table: number }[];
  #shifts = { count: 0, ptr: 0 };
  readonly #program: ProgramBuilder;
  #step: StepBuffers;
  #plan: PlanBuffers | undefined;
  /** KV groups after the first: their slots and block tables, `tokens` / `blocks` per group. */
  #groupBufs = { tokens: 0, blocks: 0, slots: 0, tables: 0 };
  readonly #profile: WasmOpProfile | undefined;

  constructor(
    rt: WasmRuntime,
    c: ModelConfig,
    kv: KvCacheSpec,
    w: ShardWeights<WasmWeight>,
    role: ReturnType<typeof sliceRole>,
    profile?: WasmOpProfile,
  ) {
    this.#role = role;
    this.#rt = rt;
    this.#profile = profile;
    this.#arena = rt.arena;
    this.#c = c;
    this.#kv = kv;
    this.#w = w;
    const vec = (v: Float32Array | undefined, what: string) => {
      if (!v) return 0;
      const p = this.#arena.alloc(v.length * 4, what);
      this.#arena.f32(p, v.length).set(v);
      return p;
    };
    this.#vectors = w.layers.map((l, i) => ({
      inputNorm: vec(l.inputNorm, `layer ${i} norm`),
      postNorm: vec(l.postNorm, `layer ${i} norm`),
      qBias: vec(l.qBias, `layer ${i} bias`),
      kBias: vec(l.kBias, `layer ${i} bias`),
      vBias: vec(l.vBias, `layer ${i} bias`),
      oBias: vec(l.oBias, `layer ${i} bias`),
      qNorm: vec(l.qNorm, `layer ${i} norm`),
      kNorm: vec(l.kNorm, `layer ${i} norm`),
      attnOutNorm: vec(l.attnOutNorm, `layer ${i} norm`),
      mlpOutNorm: vec(l.mlpOutNorm, `layer ${i} norm`),
      sinks: vec(l.sinks, `layer ${i} sinks`),
      routerBias: vec(l.moe?.routerBias, `layer ${i} router bias`),
      expertBiases: (l.moe?.experts ?? []).map((e) => ({
        gateUp: vec(e.gateUpBias, `layer ${i} expert bias`),
        down: vec(e.downBias, `layer ${i} expert bias`),
      })),
    }));
    this.#finalNorm = vec(w.finalNorm, 'final norm');
    this.#cachePtrs = [];
    this.caches = [];
    const layers = role.count;
    // With KV groups the layers share `kv.numLayers` buffers of pages.
    const buffers = kv.groups ? kv.numLayers : layers;
    for (let l = 0; l < buffers; l++) {
      const what = kv.groups ? `KV buffer ${l}` : `layer ${role.first + l} KV cache`;
      const p = this.#arena.alloc(kv.layerWords * 4, what);
      this.#cachePtrs.push(p);
      this.caches.push(this.#arena.u32(p, kv.layerWords));
    }
    // In place: the block I/O and copies hold this array.
    this.#arena.onGrow(() => {
      for (const [l, p] of this.#cachePtrs.entries()) {
        this.caches[l] = this.#arena.u32(p, kv.layerWords);
      }
    });
    // Up to 19 ops a layer (sandwich norms and Q/K norms included), key shifts and the head. A
    // mixture-of-experts layer runs its experts as a program of their own (at most two ops per
    // expert and two quantizations), after the host has routed the tokens.
    this.#program = rt.program(layers * 20 + 12 + (c.moe ? 2 * c.moe.numExperts + 4 : 0));
    this.#mass = new AttentionMass(rt.arena, c.numHeads, kv.blockSize);
    // Local indices of this executor's layers that have RoPE (`role.first + l` is the model's).
    // Key shifts are refused with KV groups (see forward): no shift groups then.
    const roped = kv.groups
      ? []
      : this.#cachePtrs.flatMap((_, l) => (c.noRopeLayers?.includes(role.first + l) ? [] : [l]));
    this.#shiftGroups = [false, true].flatMap((local) => {
      const layers = roped.filter((l) => usesLocalRope(c, role.first + l) === local);
      if (layers.length === 0) return [];
      const table = this.#arena.alloc(layers.length * 4, 'KV cache table');
      this.#arena.i32(table, layers.length).set(layers.map((l) => this.#cachePtrs[l] as number));
      return [{ layers, table }];
    });
    this.#step = this.#stepBuffers(INITIAL_TOKENS);
  }

  /** RoPE cos/sin tables covering positions below `maxPos` (rebuilt larger when needed). */
  #ropeFor(maxPos: number): { cos: number; sin: number } {
    const have = this.#rope.positions;
    if (maxPos > have) {
      const c = this.#c;
      const positions = Math.min(
        c.maxPositionEmbeddings,
        Math.max(maxPos, 2 * have, INITIAL_ROPE_POSITIONS),
      );
      const config = ropeConfig(c, positions);
      const t = ropeTables(config);
      this.#ropeHost = { config, tables: t };
      const cos = this.#arena.alloc(t.cos.length * 4, 'RoPE tables');
      this.#arena.f32(cos, t.cos.length).set(t.cos);
      const sin = this.#arena.alloc(t.sin.length * 4, 'RoPE tables');
      this.#arena.f32(sin, t.sin.length).set(t.sin);
      this.#rope = { cos, sin, positions };
      if (c.localRopeTheta !== undefined) {
        const local = layerRopeConfig(c, c.slidingWindowLayers?.[0] ?? 0, positions);
        const lt = ropeTables(local);
        const lcos = this.#arena.alloc(lt.cos.length * 4, 'RoPE tables');
        this.#arena.f32(lcos, lt.cos.length).set(lt.cos);
        const lsin = this.#arena.alloc(lt.sin.length * 4, 'RoPE tables');
        this.#arena.f32(lsin, lt.sin.length).set(lt.sin);
        this.#localRope = { cos: lcos, sin: lsin, host: { config: local, tables: lt } };
      }
    }
    return this.#rope;
  }

  /** Layer `l`'s (local index) RoPE tables, after {@link #ropeFor} covered the step. */
  #layerRope(l: number): RopeSet {
    const local = usesLocalRope(this.#c, this.#role.first + l) ? this.#localRope : undefined;
    return (
      local ?? {
        cos: this.#rope.cos,
        sin: this.#rope.sin,
        host: this.#ropeHost as { config: RopeConfig; tables: RopeTables },
      }
    );
  }

  /**
   * KV compression's key shifts as the program's first op: every layer's K rows of the listed blocks
   * re-rotated in the cache's format (c/attention.c, the bytes attention-kernels'
   * shiftKeysReference writes), all threads. Past the kernel's head dim the reference runs on
   * the host over the wasm memory's views. Needs #ropeFor to cover the largest |delta|.
   */
  #shiftKeys(plan: NormalizedPlan, p: ProgramBuilder): void {
    const kv = this.#kv;
    if (kv.headDim > KV_MAX_HEAD_DIM) {
      for (const g of this.#shiftGroups) {
        for (const l of g.layers) {
          const rope = this.#layerRope(l).host;
          const config = { ...kv, format: kv.kvFormat, rope: rope.config };
          shiftKeysReference(config, rope.tables, this.caches[l] as Uint32Array, plan.keyShifts);
        }
      }
      return;
    }
    const n = plan.keyShifts.length;
    if (n > this.#shifts.count) {
      this.#shifts = { count: Math.max(n, 2 * this.#shifts.count), ptr: 0 };
      this.#shifts.ptr = this.#arena.alloc(this.#shifts.count * 8, 'key shifts');
    }
    const words = this.#arena.i32(this.#shifts.ptr, 2 * n);
    plan.keyShifts.forEach((k, i) => {
      words[2 * i] = k.block;
      words[2 * i + 1] = k.delta;
    });
    for (const g of this.#shiftGroups) {
      const rope = this.#layerRope(g.layers[0] as number);
      // The groups' layers are disjoint: no barrier between them.
      p.push(
        Op.keyShift,
        [
          g.table,
          g.layers.length,
          this.#shifts.ptr,
          n,
          kv.numKvHeads,
          kv.headDim,
          KvCode[kv.format],
          kv.blockSize,
          kv.blockWords,
          kv.slabWords,
          rope.cos,
          rope.sin,
          this.#c.rotaryDim ?? kv.headDim,
        ],
        'key_shift',
      );
    }
    p.barrier();
  }

  #stepBuffers(tokens: number): StepBuffers {
    const c = this.#c;
    const a = (n: number) => this.#arena.alloc(n * 4, 'step activations');
    const d = c.headDim;
    return {
      tokens,
      ids: a(tokens),
      positions: a(tokens),
      slots: a(tokens),
      tokSeq: a(tokens),
      x: a(tokens * c.hiddenSize),
      xn: a(tokens * c.hiddenSize),
      q: a(tokens * c.numHeads * d),
      k: a(tokens * c.numKvHeads * d),
      v: a(tokens * c.numKvHeads * d),
      attn: a(tokens * c.numHeads * d),
      act: a(tokens * c.intermediateSize),
      xq: a((tokens * quantizedRowBytes(matmulWidth(c))) / 4),
      ...this.#moeBuffers(tokens),
    };
  }

  #moeBuffers(tokens: number) {
    const m = this.#c.moe;
    if (!m) return { router: 0, xe: 0, eact: 0, ye: 0, xeq: 0 };
    const a = (n: number) => this.#arena.alloc(n * 4, 'step activations (experts)');
    const rows = tokens * m.numExpertsPerToken;
    const h = this.#c.hiddenSize;
    const ff = m.expertIntermediateSize;
    return {
      router: a(tokens * m.numExperts),
      xe: a(rows * h),
      eact: a(rows * ff),
      ye: a(rows * h),
      xeq: a((rows * quantizedRowBytes(Math.max(h, ff))) / 4),
    };
  }

  #planBuffers(plan: NormalizedPlan): PlanBuffers {
    const need = {
      seqs: plan.numSeqs,
      blocks: plan.numSeqs * plan.maxBlocksPerSeq,
      // Only the shard with the head computes logits.
      rows: this.#role.head ? plan.logitsIndices.length : 0,
      context: Math.max(...Array.from(plan.contextLens)),
    };
    const have = this.#plan;
    if (
      have &&
      have.seqs >= need.seqs &&
      have.blocks >= need.blocks &&
      have.rows >= need.rows &&
      have.context >= need.context
    ) {
      return have;
    }
    // Grow geometrically, so a run of slowly growing plans reallocates O(log n) times (the
    // arena never frees; the old buffers are the price).
    const grow = (n: number, old = 0) => Math.max(n, 2 * old, 16);
    const seqs = grow(need.seqs, have?.seqs);
    const blocks = grow(need.blocks, have?.blocks);
    const rows = grow(need.rows, have?.rows);
    const context = grow(need.context, have?.context);
    const c = this.#c;
    const a = (n: number) => this.#arena.alloc(n * 4, 'step buffers');
    const maxK = matmulWidth(c);
    // Attention's share: scores per query head of the group (with one spare float each), the
    // rotated queries and the accumulators of the group, one loaded K or V row; or, for its
    // query tiles (attention.c's QT = 4 tokens of a prompt sharing each K/V row), four tokens'
    // scores and accumulators and one row.
    const group = c.numHeads / c.numKvHeads;
    const scoreStride = Math.ceil((context + 1) / 4) * 4;
    const attention = Math.max(
      group * scoreStride + (2 * group + 1) * c.headDim,
      ATTENTION_QUERY_TILE * group * (scoreStride + c.headDim) + c.headDim,
    );
    const scratchStride = (MATMUL_SCRATCH_PER_COL * maxK + attention + 64) * 4;
    this.#plan = {
      seqs,
      blocks,
      rows,
      context,
      queryStarts: a(seqs),
      queryLens: a(seqs),
      contextLens: a(seqs),
      tables: a(blocks),
      logitRows: a(rows),
      finalNorm: a(rows * c.hiddenSize),
      logits: a(rows * c.vocabSize),
      scratch: a((scratchStride / 4) * this.#rt.pool.threads),
      scratchStride,
      scoreStride,
    };
    return this.#plan;
  }

  /**
   * Where each KV group's slots and block tables are in the wasm memory for this step: group 0
   * uses the step's own; groups after it are copied into buffers grown as needed.
   */
  #groupPointers(
    plan: NormalizedPlan,
    slots: number,
    tables: number,
  ): { slots: number; tables: number }[] {
    const first = { slots, tables };
    const groups = plan.kvGroups;
    if (!groups || groups.length <= 1) return [first];
    const extra = groups.length - 1;
    const tokens = plan.numTokens;
    const blocks = plan.numSeqs * plan.maxBlocksPerSeq;
    let g = this.#groupBufs;
    if (tokens > g.tokens || blocks > g.blocks || extra * g.tokens === 0) {
      const nt = Math.max(tokens, 2 * g.tokens, 16);
      const nb = Math.max(blocks, 2 * g.blocks, 16);
      g = {
        tokens: nt,
        blocks: nb,
        slots: this.#arena.alloc(extra * nt * 4, 'KV group slots'),
        tables: this.#arena.alloc(extra * nb * 4, 'KV group tables'),
      };
      this.#groupBufs = g;
    }
    const out = [first];
    for (let i = 1; i <= extra; i++) {
      const grp = groups[i] as { slotMapping: Int32Array; blockTables: Uint32Array };
      const sp = g.slots + (i - 1) * g.tokens * 4;
      const tp = g.tables + (i - 1) * g.blocks * 4;
      this.#arena.i32(sp, tokens).set(grp.slotMapping);
      this.#arena.u32(tp, blocks).set(grp.blockTables);
      out.push({ slots: sp, tables: tp });
    }
    return out;
  }

  forward(plan: NormalizedPlan, hidden?: Float32Array): Float32Array {
    const c = this.#c;
    const role = this.#role;
    const kv = this.#kv;
    const arena = this.#arena;
    const t = plan.numTokens;
    if (plan.keyShifts.length > 0 && kv.groups) {
      throw new ModelError('INVALID_PLAN', 'key shifts are not supported with KV cache groups');
    }
    copyHostBlocks(kv, this.caches, plan.copies);
    this.#ropeFor(plan.ropePositions);
    if (t > this.#step.tokens) this.#step = this.#stepBuffers(Math.max(t, 2 * this.#step.tokens));
    const s = this.#step;
    const pb = this.#planBuffers(plan);
    const mass = this.#mass.prepare(plan);
    arena.i32(s.ids, t).set(plan.tokenIds);
    arena.i32(s.positions, t).set(plan.positions);
    arena.i32(s.slots, t).set(plan.slotMapping);
    const tokSeq = arena.i32(s.tokSeq, t);
    for (let q = 0; q < plan.numSeqs; q++) {
      const start = plan.queryStarts[q] as number;
      tokSeq.fill(q, start, start + (plan.queryLens[q] as number));
    }
    arena.u32(pb.queryStarts, plan.numSeqs).set(plan.queryStarts);
    arena.u32(pb.queryLens, plan.numSeqs).set(plan.queryLens);
    arena.u32(pb.contextLens, plan.numSeqs).set(plan.contextLens);
    arena.u32(pb.tables, plan.blockTables.length).set(plan.blockTables);
    const rows = role.head ? plan.logitsIndices.length : 0;
    arena.i32(pb.logitRows, rows).set(plan.logitsIndices.subarray(0, rows));
    const groupPtrs = this.#groupPointers(plan, s.slots, pb.tables);

    const p = this.#program.reset();
    // Runs the program built so far and starts the next one empty.
    const run = () => {
      if (this.#profile) this.#rt.runProfiled(p, this.#profile);
      else this.#rt.run(p);
      p.reset();
    };
    if (plan.keyShifts.length > 0) this.#shiftKeys(plan, p);
    const h = c.hiddenSize;
    const d = c.headDim;
    const w = this.#w;
    const scratch = [pb.scratch, pb.scratchStride];
    const matmul = (
      x: number,
      m: number,
      wt: WasmWeight,
      y: number,
      epilogue: keyof typeof EpilogueCode,
      label: string,
      bias = 0,
      xq = 0,
    ) => {
      const a = weightArgs(wt);
      p.push(
        Op.matmul,
        [
          x,
          m,
          wt.cols,
          wt.data,
          wt.rows,
          a.code,
          a.scales,
          a.gs,
          bias,
          y,
          EpilogueCode[epilogue],
          ...scratch,
          isGgmlFormat(wt.format) ? xq : 0,
        ],
        `matmul ${label}`,
      );
    };
    // x[m][k] quantized once for the GGML matmuls that follow (when one of `ws` is GGML);
    // returns where, or 0. Below SHARED_QUANTIZE_TOKENS rows each thread's matmul quantizes x
    // itself instead (the same bits): a few hundred values cost less than a barrier.
    const quantize = (x: number, m: number, ws: readonly WasmWeight[]) => {
      const g = ws.find((wt) => isGgmlFormat(wt.format));
      if (!g || m < SHARED_QUANTIZE_TOKENS) return 0;
      p.push(Op.quantize, [x, m, g.cols, s.xq], 'quantize').barrier();
      return s.xq;
    };
    if (role.embed) {
      const table = w.embed as WasmWeight;
      const embed = weightArgs(table);
      const scale = c.embeddingScale === undefined ? 0 : f32Word(c.embeddingScale);
      p.push(
        Op.embed,
        [s.ids, t, table.data, embed.code, h, embed.scales, embed.gs, s.x, scale],
        'embed',
      );
      p.barrier();
    } else {
      arena.f32(s.x, t * h).set(checkHidden(hidden, t, h));
    }
    const eps = f32Word(c.rmsNormEps);
    const kvCode = KvCode[kv.format];
    const gate = c.mlpActivation === 'gelu-tanh' ? 'geglu' : 'swiglu';
    const scale = f32Word(c.attentionScale ?? 1 / Math.sqrt(d));
    // x += a · Wᵀ (+ bias): fused into the matmul, or with a sandwich norm, the projection
    // normalized and added (into xn, which nothing reads by then).
    const project = (
      a: number,
      wt: WasmWeight,
      norm: number,
      label: string,
      bias: number,
      xq: number,
    ) => {
      if (norm === 0) {
        matmul(a, t, wt, s.x, 'residual', label, bias, xq);
        p.barrier();
        return;
      }
      matmul(a, t, wt, s.xn, 'store', label, bias, xq);
      p.barrier();
      p.push(Op.rmsNorm, [s.xn, t, h, norm, eps, s.x, 0, 1], 'rms_norm').barrier();
    };
    for (let l = 0; l < role.count; l++) {
      const lw = w.layers[l] as LayerWeights<WasmWeight>;
      const vec = this.#vectors[l] as LayerVectors;
      const rope = this.#layerRope(l);
      const window = layerWindow(c, role.first + l) ?? 0;
      const kvOf = layerKv(kv.groups, role.first + l);
      const cachePtr = this.#cachePtrs[kv.groups ? kvOf.buffer : l] as number;
      const { slots, tables } = groupPtrs[kvOf.group] as { slots: number; tables: number };
      p.push(Op.rmsNorm, [s.x, t, h, vec.inputNorm, eps, s.xn, 0], 'rms_norm').barrier();
      // q, k and v read only xn: no barrier between them.
      const xqn = quantize(s.xn, t, [lw.q, lw.k, lw.v]);
      matmul(s.xn, t, lw.q, s.q, 'store', 'q', vec.qBias, xqn);
      matmul(s.xn, t, lw.k, s.k, 'store', 'k', vec.kBias, xqn);
      matmul(s.xn, t, lw.v, s.v, 'store', 'v', vec.vBias, xqn);
      p.barrier();
      if (vec.qNorm !== 0) {
        // Qwen3's Q/K norm: every head's row of d values, in place, before RoPE.
        p.push(Op.rmsNorm, [s.q, t * c.numHeads, d, vec.qNorm, eps, s.q, 0], 'qk_norm');
        p.push(Op.rmsNorm, [s.k, t * c.numKvHeads, d, vec.kNorm, eps, s.k, 0], 'qk_norm');
        p.barrier();
      }
      p.push(
        Op.ropeKv,
        [
          s.q,
          s.k,
          s.v,
          t,
          s.positions,
          slots,
          c.numHeads,
          c.numKvHeads,
          d,
          rope.cos,
          rope.sin,
          cachePtr,
          kvCode,
          kv.blockSize,
          kv.blockWords,
          kv.slabWords,
          c.noRopeLayers?.includes(role.first + l) ? 1 : 0,
          c.rotaryDim ?? d,
          f32Word(ropeQueryScale(c)),
        ],
        'rope_kv',
      ).barrier();
      p.push(
        Op.attention,
        [
          s.q,
          s.attn,
          t,
          s.tokSeq,
          pb.queryStarts,
          pb.queryLens,
          pb.contextLens,
          tables,
          plan.maxBlocksPerSeq,
          c.numHeads,
          c.numKvHeads,
          d,
          cachePtr,
          kvCode,
          kv.blockSize,
          kv.blockWords,
          kv.slabWords,
          window,
          scale,
          pb.scratch + MATMUL_SCRATCH_PER_COL * 4 * matmulWidth(c),
          pb.scratchStride,
          pb.scoreStride,
          ...mass,
          vec.sinks,
        ],
        'attention',
      ).barrier();
      project(s.attn, lw.o, vec.attnOutNorm, 'o', vec.oBias, quantize(s.attn, t, [lw.o]));
      p.push(Op.rmsNorm, [s.x, t, h, vec.postNorm, eps, s.xn, 0], 'rms_norm').barrier();
      if (lw.moe && c.moe) {
        const { router, experts } = lw.moe;
        matmul(
          s.xn,
          t,
          router,
          s.router,
          'store',
          'router',
          vec.routerBias,
          quantize(s.xn, t, [router]),
        );
        p.barrier();
        // Routing needs the router's logits: the program so far runs, the host groups the
        // tokens by expert, and each chosen expert multiplies only its tokens' rows.
        run();
        const route = routeExperts(arena.f32(s.router, t * c.moe.numExperts), t, c.moe);
        const rows = t * c.moe.numExpertsPerToken;
        gatherExpertRows(route, arena.f32(s.xn, t * h), h, arena.f32(s.xe, rows * h));
        const ff = c.moe.expertIntermediateSize;
        const active: [WasmWeight, WasmWeight, number, number, number][] = [];
        for (let e = 0; e < c.moe.numExperts; e++) {
          const start = route.offsets[e] as number;
          const n = (route.offsets[e + 1] as number) - start;
          const ex = experts[e] as { gateUp: WasmWeight; down: WasmWeight };
          if (n > 0) active.push([ex.gateUp, ex.down, start, n, e]);
        }
        const glu = c.moe.activation === 'swiglu-oai' ? 'swiglu-oai' : 'swiglu';
        const biasOf = (e: number) => vec.expertBiases[e] ?? { gateUp: 0, down: 0 };
        // One quantization of every grouped row serves every expert's GGML matmul.
        const shared = (x: number, width: number, ws: WasmWeight[]) => {
          if (rows < SHARED_QUANTIZE_TOKENS || !ws.some((wt) => isGgmlFormat(wt.format))) return 0;
          p.push(Op.quantize, [x, rows, width, s.xeq], 'quantize').barrier();
          return s.xeq;
        };
        const xq1 = shared(
          s.xe,
          h,
          active.map((a) => a[0]),
        );
        for (const [gateUp, , start, n, e] of active) {
          const xq = xq1 && xq1 + start * quantizedRowBytes(h);
          matmul(
            s.xe + start * h * 4,
            n,
            gateUp,
            s.eact + start * ff * 4,
            glu,
            'expert gate_up',
            biasOf(e).gateUp,
            xq,
          );
        }
        p.barrier();
        const xq2 = shared(
          s.eact,
          ff,
          active.map((a) => a[1]),
        );
        for (const [, down, start, n, e] of active) {
          const xq = xq2 && xq2 + start * quantizedRowBytes(ff);
          matmul(
            s.eact + start * ff * 4,
            n,
            down,
            s.ye + start * h * 4,
            'store',
            'expert down',
            biasOf(e).down,
            xq,
          );
        }
        p.barrier();
        run();
        addExpertOutputs(route, arena.f32(s.ye, rows * h), h, arena.f32(s.x, t * h));
        continue;
      }
      const gateUp = lw.gateUp as WasmWeight;
      const down = lw.down as WasmWeight;
      matmul(s.xn, t, gateUp, s.act, gate, 'gate_up', 0, quantize(s.xn, t, [gateUp]));
      p.barrier();
      project(s.act, down, vec.mlpOutNorm, 'down', 0, quantize(s.act, t, [down]));
    }
    const lmHead = w.lmHead as WasmWeight;
    if (rows > 0) {
      p.push(
        Op.rmsNorm,
        [s.x, rows, h, this.#finalNorm, eps, pb.finalNorm, pb.logitRows],
        'rms_norm',
      );
      p.barrier();
      const xql = quantize(pb.finalNorm, rows, [lmHead]);
      matmul(pb.finalNorm, rows, lmHead, pb.logits, 'store', 'lm_head', 0, xql);
    }
    run();
    if (mass[0] !== 0) this.#mass.collect(plan);
    if (!role.head) return arena.f32(s.x, t * h).slice();
    if (rows === 0) return new Float32Array(0);
    const logits = arena.f32(pb.logits, rows * c.vocabSize).slice();
    if (c.finalLogitSoftcap !== undefined) softcapLogits(logits, c.finalLogitSoftcap);
    return logits;
  }
}
