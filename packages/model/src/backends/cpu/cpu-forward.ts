import {
  applyRopeReference,
  type RopeConfig,
  type RopeTables,
  ropeTables,
  shiftKeysReference,
} from '@kvasir/attention-kernels';
import { f16BitsToF32, f32ToF16Bits } from '@kvasir/quantizer';
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
import { checkHidden, type LayerSlice, sliceRole } from '../../execution/executor.js';
import { type NormalizedPlan, planForGroup } from '../../execution/forward-plan.js';
import { copyHostBlocks } from '../../execution/kv-blocks.js';
import { type KvCacheSpec, kvRowWord } from '../../execution/kv-cache.js';
import { layerKv } from '../../execution/kv-groups.js';
import { addExpertOutputs, gatherExpertRows, routeExperts } from '../../execution/moe-routing.js';
import type {
  ExpertWeights,
  LayerWeights,
  ModelWeights,
  MoeLayerWeights,
  ShardWeights,
} from '../../execution/weights.js';
import {
  addRef,
  embeddingRef,
  matmulRef,
  rmsNormRef,
  softcapLogits,
} from '../../kernels/reference.js';
import type { StoredWeight } from '../../kernels/weight-format.js';

/** Encodes one K or V row into the cache (f32 words or f16 pairs). */
export function encodeKvRow(
  spec: KvCacheSpec,
  cache: Uint32Array,
  word: number,
  row: Float32Array,
  off: number,
): void {
  const d = spec.headDim;
  if (spec.format !== 'f32' && spec.format !== 'f16') {
    const slab = Math.floor(word / spec.slabWords) * spec.slabWords;
    spec.kvFormat.encodeRow(
      cache,
      slab,
      (word - slab) / spec.rowWords,
      row.subarray(off, off + d),
      spec.blockSize,
    );
    return;
  }
  if (spec.format === 'f32') {
    const f = new Float32Array(cache.buffer, cache.byteOffset + word * 4, d);
    f.set(row.subarray(off, off + d));
    return;
  }
  for (let i = 0; i < d; i += 2) {
    cache[word + i / 2] =
      (f32ToF16Bits(row[off + i] as number) | (f32ToF16Bits(row[off + i + 1] as number) << 16)) >>>
      0;
  }
}

/** Decodes one cached row into `out`. */
export function decodeKvRow(
  spec: KvCacheSpec,
  cache: Uint32Array,
  word: number,
  out: Float32Array,
): void {
  const d = spec.headDim;
  if (spec.format !== 'f32' && spec.format !== 'f16') {
    const slab = Math.floor(word / spec.slabWords) * spec.slabWords;
    spec.kvFormat.decodeRow(cache, slab, (word - slab) / spec.rowWords, out, spec.blockSize);
    return;
  }
  if (spec.format === 'f32') {
    out.set(new Float32Array(cache.buffer, cache.byteOffset + word * 4, d));
    return;
  }
  for (let i = 0; i < d; i += 2) {
    const w = cache[word + i / 2] as number;
    out[i] = f16BitsToF32(w & 0xffff);
    out[i + 1] = f16BitsToF32(w >>> 16);
  }
}

/**
 * Causal paged attention on the CPU for every query row of the plan: token i of a sequence
 * (of `queryLen` new tokens) attends to cache positions `[0, contextLen - queryLen + i]`, or on
 * a sliding-window layer (`window`), to the last `window` of them. Scores (times `scale`,
 * default `1 / sqrt(headDim)`) and sums in f64. Output `[numTokens][numHeads * headDim]`.
 * When `mass[s]` is given,
 * the probabilities of row `s`'s last `plan.massQueries[s]` queries are added into it per
 * logical block (every head).
 */
export function pagedAttentionCpu(
  c: ModelConfig,
  spec: KvCacheSpec,
  cache: Uint32Array,
  q: Float32Array,
  plan: NormalizedPlan,
  out: Float32Array,
  mass?: readonly (Float64Array | undefined)[],
  layer: {
    readonly window?: number | null;
    readonly scale?: number;
    /** One sink logit per query head: a key with no value in every softmax (gpt-oss). */
    readonly sinks?: Float32Array;
  } = {},
): void {
  const sinks = layer.sinks;
  const d = c.headDim;
  const hq = c.numHeads;
  const group = hq / c.numKvHeads;
  const scale = layer.scale ?? 1 / Math.sqrt(d);
  const window = layer.window ?? null;
  const maxCtx = Math.max(...Array.from(plan.contextLens));
  const scores = new Float64Array(maxCtx);
  const krow = new Float32Array(d);
  const acc = new Float64Array(d);
  for (let s = 0; s < plan.numSeqs; s++) {
    const qs = plan.queryStarts[s] as number;
    const ql = plan.queryLens[s] as number;
    const ctx = plan.contextLens[s] as number;
    const table = plan.blockTables.subarray(
      s * plan.maxBlocksPerSeq,
      (s + 1) * plan.maxBlocksPerSeq,
    );
    const slotOf = (j: number) =>
      (table[Math.floor(j / spec.blockSize)] as number) * spec.blockSize + (j % spec.blockSize);
    const rowMass = mass?.[s];
    const firstMass = ql - (plan.massQueries[s] as number);
    for (let i = 0; i < ql; i++) {
      const tok = qs + i;
      const visible = ctx - ql + i + 1;
      // Keys before `first` are outside the window: never read.
      const first = window === null ? 0 : Math.max(0, visible - window);
      for (let h = 0; h < hq; h++) {
        const kvh = Math.floor(h / group);
        const qo = tok * hq * d + h * d;
        const sink = sinks ? (sinks[h] as number) : Number.NEGATIVE_INFINITY;
        let max = sink;
        for (let j = first; j < visible; j++) {
          decodeKvRow(spec, cache, kvRowWord(spec, slotOf(j), kvh, 0), krow);
          let dot = 0;
          for (let e = 0; e < d; e++) dot += (q[qo + e] as number) * (krow[e] as number);
          scores[j] = dot * scale;
          if (dot * scale > max) max = dot * scale;
        }
        // The sink joins the denominator only (exp(-inf) = 0 without one).
        let sum = Math.exp(sink - max);
        acc.fill(0);
        for (let j = first; j < visible; j++) {
          const p = Math.exp((scores[j] as number) - max);
          sum += p;
          decodeKvRow(spec, cache, kvRowWord(spec, slotOf(j), kvh, 1), krow);
          for (let e = 0; e < d; e++) acc[e] = (acc[e] as number) + p * (krow[e] as number);
        }
        for (let e = 0; e < d; e++) out[qo + e] = (acc[e] as number) / sum;
        if (rowMass !== undefined && i >= firstMass) {
          for (let j = first; j < visible; j++) {
            const b = Math.floor(j / spec.blockSize);
            rowMass[b] = (rowMass[b] as number) + Math.exp((scores[j] as number) - max) / sum;
          }
        }
      }
    }
  }
}

/**
 * A mixture-of-experts MLP on the CPU: `xn` (`[t][h]`) routed, each expert run once over the
 * rows of the tokens it was chosen for, the weighted sums added into `x`.
 */
export function moeFfnCpu(
  moe: MoeConfig,
  w: MoeLayerWeights<StoredWeight>,
  xn: Float32Array,
  t: number,
  h: number,
  x: Float32Array,
): void {
  const route = routeExperts(
    matmulRef(xn, t, w.router, w.routerBias ? { bias: w.routerBias } : {}),
    t,
    moe,
  );
  const epilogue = moe.activation === 'swiglu-oai' ? 'swiglu-oai' : 'swiglu';
  const rows = t * moe.numExpertsPerToken;
  const xe = new Float32Array(rows * h);
  gatherExpertRows(route, xn, h, xe);
  const y = new Float32Array(rows * h);
  for (let e = 0; e < moe.numExperts; e++) {
    const start = route.offsets[e] as number;
    const n = (route.offsets[e + 1] as number) - start;
    if (n === 0) continue;
    const expert = w.experts[e] as ExpertWeights<StoredWeight>;
    const act = matmulRef(xe.subarray(start * h, (start + n) * h), n, expert.gateUp, {
      epilogue,
      ...(expert.gateUpBias ? { bias: expert.gateUpBias } : {}),
    });
    y.set(
      matmulRef(act, n, expert.down, expert.downBias ? { bias: expert.downBias } : {}),
      start * h,
    );
  }
  addExpertOutputs(route, y, h, x);
}

/**
 * Multiplies the first `rot` dims of each of `rows` rows of `d` by `scale` (LongRoPE's attention
 * factor squared on the rotated dims of Q; see `ModelConfig.ropeAttentionFactor`), in f32.
 */
export function scaleRotatedDims(
  x: Float32Array,
  rows: number,
  d: number,
  rot: number,
  scale: number,
): void {
  if (scale === 1) return;
  const s = Math.fround(scale);
  for (let r = 0; r < rows; r++) {
    for (let i = r * d; i < r * d + rot; i++) x[i] = Math.fround((x[i] as number) * s);
  }
}

/**
 * The forward pass on the CPU with the reference kernels, over a host-side paged cache in
 * the same layout as the GPU's (one `Uint32Array` per layer). Given a `layers` slice, it runs
 * those layers only (one shard of a model split by layer), with `weights` and `spec` of the
 * slice.
 */
export class CpuForward {
  readonly caches: Uint32Array[];
  readonly #role: ReturnType<typeof sliceRole>;
  #rope: { config: RopeConfig; tables: RopeTables } | undefined;
  /** The sliding-window layers' own RoPE, when the config gives them one. */
  #localRope: { config: RopeConfig; tables: RopeTables } | undefined;

  constructor(
    readonly config: ModelConfig,
    readonly weights: ModelWeights<StoredWeight> | ShardWeights<StoredWeight>,
    readonly spec: KvCacheSpec,
    layers?: LayerSlice,
  ) {
    this.#role = sliceRole(layers, config.numLayers);
    if (spec.groups && this.#role.count !== config.numLayers) {
      throw new ModelError(
        'INVALID_ARGUMENT',
        'KV cache groups need the whole model on one device (a layer slice was given)',
      );
    }
    // With KV groups the layers share `spec.numLayers` buffers of pages.
    const buffers = spec.groups ? spec.numLayers : this.#role.count;
    this.caches = Array.from({ length: buffers }, () => new Uint32Array(spec.layerWords));
  }

  #ropeFor(maxPos: number): { config: RopeConfig; tables: RopeTables } {
    const have = this.#rope?.config.maxPosition ?? 0;
    if (!this.#rope || maxPos > have) {
      const config = ropeConfig(this.config, Math.max(maxPos, 2 * have, 256));
      this.#rope = { config, tables: ropeTables(config) };
      if (this.config.localRopeTheta !== undefined) {
        const local = layerRopeConfig(
          this.config,
          this.config.slidingWindowLayers?.[0] ?? 0,
          config.maxPosition,
        );
        this.#localRope = { config: local, tables: ropeTables(local) };
      }
    }
    return this.#rope;
  }

  /** Layer `l`'s RoPE (model index), after {@link #ropeFor} covered the step. */
  #layerRope(l: number): { config: RopeConfig; tables: RopeTables } {
    const local = usesLocalRope(this.config, l) ? this.#localRope : undefined;
    return local ?? (this.#rope as { config: RopeConfig; tables: RopeTables });
  }

  /**
   * Runs one step; returns logits `[logitsIndices.length][vocab]`, or on a shard before the
   * last, the hidden states `[numTokens][hiddenSize]`. A shard after the first starts from
   * `hidden` (the previous shard's output) instead of the embedding.
   */
  forward(plan: NormalizedPlan, hidden?: Float32Array): Float32Array {
    const c = this.config;
    const spec = this.spec;
    const w = this.weights;
    const t = plan.numTokens;
    const h = c.hiddenSize;
    const d = c.headDim;
    copyHostBlocks(spec, this.caches, plan.copies);
    this.#ropeFor(plan.ropePositions);
    if (plan.keyShifts.length > 0 && spec.groups) {
      throw new ModelError('INVALID_PLAN', 'key shifts are not supported with KV cache groups');
    }
    if (plan.keyShifts.length > 0) {
      // A NoPE layer's keys carry no position: nothing to shift.
      for (const [l, cache] of this.caches.entries()) {
        if (c.noRopeLayers?.includes(this.#role.first + l)) continue;
        const lr = this.#layerRope(this.#role.first + l);
        const shift = { ...spec, format: spec.kvFormat, rope: lr.config };
        shiftKeysReference(shift, lr.tables, cache, plan.keyShifts);
      }
    }
    // Mass sums over layers in f64 and lands in the row's array once, at the end.
    const mass = plan.massOut.map((m, r) =>
      m === undefined
        ? undefined
        : new Float64Array(Math.ceil((plan.contextLens[r] as number) / spec.blockSize)),
    );
    const positions = Uint32Array.from(plan.positions);
    const role = this.#role;
    const x = role.embed
      ? embeddingRef(plan.tokenIds, w.embed as StoredWeight)
      : checkHidden(hidden, t, h).slice();
    if (role.embed && c.embeddingScale !== undefined) {
      const scale = Math.fround(c.embeddingScale);
      for (let i = 0; i < x.length; i++) x[i] = (x[i] as number) * scale;
    }
    const gate = c.mlpActivation === 'gelu-tanh' ? 'geglu' : 'swiglu';
    const attn = new Float32Array(t * c.numHeads * d);
    for (let l = 0; l < role.count; l++) {
      const lw = w.layers[l] as LayerWeights<StoredWeight>;
      const kvOf = layerKv(spec.groups, role.first + l);
      const cache = this.caches[spec.groups ? kvOf.buffer : l] as Uint32Array;
      const lp = planForGroup(plan, kvOf.group);
      const xn = rmsNormRef(x, t, h, lw.inputNorm, c.rmsNormEps);
      const q = matmulRef(xn, t, lw.q, { bias: lw.qBias });
      const k = matmulRef(xn, t, lw.k, { bias: lw.kBias });
      const v = matmulRef(xn, t, lw.v, { bias: lw.vBias });
      if (lw.qNorm && lw.kNorm) {
        rmsNormRef(q, t * c.numHeads, d, lw.qNorm, c.rmsNormEps, undefined, q);
        rmsNormRef(k, t * c.numKvHeads, d, lw.kNorm, c.rmsNormEps, undefined, k);
      }
      if (!c.noRopeLayers?.includes(role.first + l)) {
        const lr = this.#layerRope(role.first + l);
        applyRopeReference(lr.config, lr.tables, q, k, positions);
        scaleRotatedDims(q, t * c.numHeads, d, c.rotaryDim ?? d, ropeQueryScale(c));
      }
      for (let i = 0; i < t; i++) {
        const slot = lp.slotMapping[i] as number;
        if (slot < 0) continue;
        for (let kh = 0; kh < c.numKvHeads; kh++) {
          const off = (i * c.numKvHeads + kh) * d;
          encodeKvRow(spec, cache, kvRowWord(spec, slot, kh, 0), k, off);
          encodeKvRow(spec, cache, kvRowWord(spec, slot, kh, 1), v, off);
        }
      }
      pagedAttentionCpu(c, spec, cache, q, lp, attn, mass, {
        window: layerWindow(c, role.first + l),
        ...(c.attentionScale !== undefined ? { scale: c.attentionScale } : {}),
        ...(lw.sinks ? { sinks: lw.sinks } : {}),
      });
      this.#project(attn, t, lw.o, x, lw.attnOutNorm, lw.oBias);
      const xn2 = rmsNormRef(x, t, h, lw.postNorm, c.rmsNormEps);
      if (lw.moe && c.moe) {
        moeFfnCpu(c.moe, lw.moe, xn2, t, h, x);
        continue;
      }
      const act = matmulRef(xn2, t, lw.gateUp as StoredWeight, { epilogue: gate });
      this.#project(act, t, lw.down as StoredWeight, x, lw.mlpOutNorm);
    }
    for (const [r, m] of mass.entries()) if (m !== undefined) plan.massOut[r]?.set(m);
    if (!role.head) return x;
    const rows = plan.logitsIndices;
    if (rows.length === 0) return new Float32Array(0);
    const fin = rmsNormRef(x, rows.length, h, w.finalNorm as Float32Array, c.rmsNormEps, rows);
    const logits = matmulRef(fin, rows.length, w.lmHead as StoredWeight);
    if (c.finalLogitSoftcap !== undefined) softcapLogits(logits, c.finalLogitSoftcap);
    return logits;
  }

  /**
   * `x += a · Wᵀ (+ bias)`: fused into the matmul, or with sandwich norms (`norm`), the
   * projection RMS-normalized before the add.
   */
  #project(
    a: Float32Array,
    t: number,
    wt: StoredWeight,
    x: Float32Array,
    norm: Float32Array | undefined,
    bias?: Float32Array,
  ): void {
    if (!norm) {
      matmulRef(a, t, wt, { ...(bias ? { bias } : {}), epilogue: 'residual', out: x });
      return;
    }
    const y = matmulRef(a, t, wt, bias ? { bias } : {});
    const h = this.config.hiddenSize;
    addRef(x, rmsNormRef(y, t, h, norm, this.config.rmsNormEps, undefined, y));
  }
}
