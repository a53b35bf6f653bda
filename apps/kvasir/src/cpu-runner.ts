import { createHash } from 'node:crypto';
import type { BlockCopy, KvLayout } from '@kvasir/kv-allocator';
import {
  type CheckpointReader,
  type ModelConfig,
  ModelTokenizer,
  openCheckpoint,
  ropeInvFrequencies,
} from '@kvasir/model';
import type { BatchPlan } from '@kvasir/scheduler';
import type { ChatMessage } from '@kvasir/server';
import { KvasirAppError } from './errors.js';
import type { ModelFacts, ModelRunner, TextCodec } from './runner.js';

interface LayerWeights {
  inputNorm: Float32Array;
  q: Float32Array;
  k: Float32Array;
  v: Float32Array;
  qBias: Float32Array | undefined;
  kBias: Float32Array | undefined;
  vBias: Float32Array | undefined;
  o: Float32Array;
  oBias: Float32Array | undefined;
  postNorm: Float32Array;
  gate: Float32Array;
  up: Float32Array;
  down: Float32Array;
}

/** Weights of a Llama-family model as float32, HF layout (`[out, in]` row-major). */
export interface CpuWeights {
  readonly config: ModelConfig;
  readonly embed: Float32Array;
  readonly layers: readonly LayerWeights[];
  readonly finalNorm: Float32Array;
  /** The LM head (the embedding when tied). */
  readonly lmHead: Float32Array;
  /** SHA-256 over the weights' bytes, for offload namespaces. */
  readonly digest: string;
  readonly bytes: number;
}

/**
 * Reads every tensor of a checkpoint (HF directory or GGUF) as float32.
 * @throws ModelError from @kvasir/model for malformed or truncated files.
 */
export async function loadCpuWeights(reader: CheckpointReader): Promise<CpuWeights> {
  const c = reader.config;
  const hash = createHash('sha256');
  let bytes = 0;
  const read = async (name: string) => {
    const t = await reader.readTensorF32(name);
    hash.update(new Uint8Array(t.buffer, t.byteOffset, t.byteLength));
    bytes += t.byteLength;
    return t;
  };
  const maybe = async (name: string) => (reader.tensors.has(name) ? read(name) : undefined);
  const embed = await read('model.embed_tokens.weight');
  const layers: LayerWeights[] = [];
  for (let l = 0; l < c.numLayers; l++) {
    const p = `model.layers.${l}.`;
    layers.push({
      inputNorm: await read(`${p}input_layernorm.weight`),
      q: await read(`${p}self_attn.q_proj.weight`),
      k: await read(`${p}self_attn.k_proj.weight`),
      v: await read(`${p}self_attn.v_proj.weight`),
      qBias: await maybe(`${p}self_attn.q_proj.bias`),
      kBias: await maybe(`${p}self_attn.k_proj.bias`),
      vBias: await maybe(`${p}self_attn.v_proj.bias`),
      o: await read(`${p}self_attn.o_proj.weight`),
      oBias: await maybe(`${p}self_attn.o_proj.bias`),
      postNorm: await read(`${p}post_attention_layernorm.weight`),
      gate: await read(`${p}mlp.gate_proj.weight`),
      up: await read(`${p}mlp.up_proj.weight`),
      down: await read(`${p}mlp.down_proj.weight`),
    });
  }
  const finalNorm = await read('model.norm.weight');
  const lmHead = c.tieWordEmbeddings ? embed : await read('lm_head.weight');
  return { config: c, embed, layers, finalNorm, lmHead, digest: hash.digest('hex'), bytes };
}

/**
 * y[t, o] = Σ_i W[o, i] · x[t, i] (+ b[o]) for `rows` rows. Four rows share each weight load
 * (decode is bound by reading weights); every row sums in the same order whatever the batch, so
 * a sequence's logits do not depend on what it is batched with.
 */
function matmul(
  x: Float32Array,
  rows: number,
  inDim: number,
  w: Float32Array,
  outDim: number,
  bias: Float32Array | undefined,
  y: Float32Array,
): void {
  let t = 0;
  for (; t + 4 <= rows; t += 4) {
    const x0 = t * inDim;
    const x1 = x0 + inDim;
    const x2 = x1 + inDim;
    const x3 = x2 + inDim;
    const y0 = t * outDim;
    for (let o = 0; o < outDim; o++) {
      const wo = o * inDim;
      let a0 = 0;
      let a1 = 0;
      let a2 = 0;
      let a3 = 0;
      for (let i = 0; i < inDim; i++) {
        const wv = w[wo + i]!;
        a0 += wv * x[x0 + i]!;
        a1 += wv * x[x1 + i]!;
        a2 += wv * x[x2 + i]!;
        a3 += wv * x[x3 + i]!;
      }
      const b = bias ? bias[o]! : 0;
      y[y0 + o] = a0 + b;
      y[y0 + outDim + o] = a1 + b;
      y[y0 + 2 * outDim + o] = a2 + b;
      y[y0 + 3 * outDim + o] = a3 + b;
    }
  }
  for (; t < rows; t++) {
    const xo = t * inDim;
    const yo = t * outDim;
    for (let o = 0; o < outDim; o++) {
      const wo = o * inDim;
      let acc = 0;
      for (let i = 0; i < inDim; i++) acc += w[wo + i]! * x[xo + i]!;
      y[yo + o] = acc + (bias ? bias[o]! : 0);
    }
  }
}

function rmsNorm(
  x: Float32Array,
  rows: number,
  dim: number,
  w: Float32Array,
  eps: number,
  y: Float32Array,
): void {
  for (let t = 0; t < rows; t++) {
    const o = t * dim;
    let ss = 0;
    for (let i = 0; i < dim; i++) ss += x[o + i]! * x[o + i]!;
    const inv = 1 / Math.sqrt(ss / dim + eps);
    for (let i = 0; i < dim; i++) y[o + i] = x[o + i]! * inv * w[i]!;
  }
}

/**
 * A Llama-family forward pass in plain TypeScript over a paged f32 KV cache: the engine's
 * backend where no WebGPU adapter is wanted or available. Same cache layout as the GPU kernels
 * (per layer, block-major; in a block, per KV head, the K slab then the V slab).
 */
export class CpuModelRunner implements ModelRunner {
  readonly facts: ModelFacts;
  readonly codec: TextCodec;
  readonly #w: CpuWeights;
  readonly #cache: Float32Array[];
  readonly #invFreq: Float64Array;
  readonly #blockFloats: number;
  readonly #slabFloats: number;

  constructor(
    weights: CpuWeights,
    tokenizer: ModelTokenizer,
    numBlocks: number,
    blockSize: number,
    modelId: string,
    maxModelLen: number,
  ) {
    const c = weights.config;
    this.#w = weights;
    this.#invFreq = ropeInvFrequencies(c);
    this.#slabFloats = blockSize * c.headDim;
    this.#blockFloats = 2 * c.numKvHeads * this.#slabFloats;
    this.#cache = Array.from(
      { length: c.numLayers },
      () => new Float32Array(numBlocks * this.#blockFloats),
    );
    const kvLayout: KvLayout = {
      numLayers: c.numLayers,
      numKvHeads: c.numKvHeads,
      headDim: c.headDim,
      blockSize,
      bytesPerElement: 4,
    };
    this.facts = {
      modelId,
      vocabSize: c.vocabSize,
      maxModelLen,
      eosTokenIds: c.eosTokenIds,
      kvLayout,
      blockBytes: this.#blockFloats * 4 * c.numLayers,
      numBlocks,
      weightBytes: weights.bytes,
      weightDigest: weights.digest,
      backend: 'cpu (plain TypeScript, f32)',
      canMoveBlocks: true,
    };
    this.codec = codecFor(tokenizer);
  }

  async forward(plan: BatchPlan): Promise<Float32Array> {
    const c = this.#w.config;
    const n = plan.numTokens;
    const H = c.hiddenSize;
    const hd = c.headDim;
    const nq = c.numHeads;
    const nkv = c.numKvHeads;
    const group = nq / nkv;
    const qDim = nq * hd;
    const kvDim = nkv * hd;
    const inter = c.intermediateSize;
    const x = new Float32Array(n * H);
    for (let t = 0; t < n; t++) {
      const id = plan.tokenIds[t]!;
      x.set(this.#w.embed.subarray(id * H, (id + 1) * H), t * H);
    }
    const h = new Float32Array(n * H);
    const q = new Float32Array(n * qDim);
    const k = new Float32Array(n * kvDim);
    const v = new Float32Array(n * kvDim);
    const attn = new Float32Array(n * qDim);
    const o = new Float32Array(n * H);
    const g = new Float32Array(n * inter);
    const u = new Float32Array(n * inter);
    const scale = 1 / Math.sqrt(hd);
    const bs = this.facts.kvLayout.blockSize;
    let scores = new Float64Array(64);

    for (let l = 0; l < c.numLayers; l++) {
      const w = this.#w.layers[l]!;
      const cache = this.#cache[l]!;
      rmsNorm(x, n, H, w.inputNorm, c.rmsNormEps, h);
      matmul(h, n, H, w.q, qDim, w.qBias, q);
      matmul(h, n, H, w.k, kvDim, w.kBias, k);
      matmul(h, n, H, w.v, kvDim, w.vBias, v);
      for (let t = 0; t < n; t++) {
        const pos = plan.positions[t]!;
        this.#rope(q, t * qDim, nq, pos);
        this.#rope(k, t * kvDim, nkv, pos);
        const slot = plan.slotMapping[t]!;
        if (slot < 0) continue;
        const block = Math.floor(slot / bs);
        const off = slot % bs;
        for (let kh = 0; kh < nkv; kh++) {
          const base = block * this.#blockFloats + 2 * kh * this.#slabFloats + off * hd;
          cache.set(k.subarray(t * kvDim + kh * hd, t * kvDim + (kh + 1) * hd), base);
          cache.set(
            v.subarray(t * kvDim + kh * hd, t * kvDim + (kh + 1) * hd),
            base + this.#slabFloats,
          );
        }
      }
      // Causal attention of each row's new tokens over everything its sequence has cached.
      for (let r = 0; r < plan.rows.length; r++) {
        const row = plan.rows[r]!;
        const table = row.blockTable;
        for (let i = 0; i < row.queryLen; i++) {
          const t = row.queryStart + i;
          const pos = plan.positions[t]!;
          const start = c.slidingWindow ? Math.max(0, pos - c.slidingWindow + 1) : 0;
          const len = pos + 1 - start;
          if (scores.length < len) scores = new Float64Array(len * 2);
          for (let head = 0; head < nq; head++) {
            const kh = Math.floor(head / group);
            const qo = t * qDim + head * hd;
            let max = Number.NEGATIVE_INFINITY;
            for (let j = 0; j < len; j++) {
              const p = start + j;
              const base =
                table[Math.floor(p / bs)]! * this.#blockFloats +
                2 * kh * this.#slabFloats +
                (p % bs) * hd;
              let dot = 0;
              for (let d = 0; d < hd; d++) dot += q[qo + d]! * cache[base + d]!;
              const s = dot * scale;
              scores[j] = s;
              if (s > max) max = s;
            }
            let sum = 0;
            for (let j = 0; j < len; j++) {
              const e = Math.exp(scores[j]! - max);
              scores[j] = e;
              sum += e;
            }
            const out = attn.subarray(qo, qo + hd);
            out.fill(0);
            for (let j = 0; j < len; j++) {
              const p = start + j;
              const base =
                table[Math.floor(p / bs)]! * this.#blockFloats +
                (2 * kh + 1) * this.#slabFloats +
                (p % bs) * hd;
              const pj = scores[j]! / sum;
              for (let d = 0; d < hd; d++) out[d]! += pj * cache[base + d]!;
            }
          }
        }
      }
      matmul(attn, n, qDim, w.o, H, w.oBias, o);
      for (let i = 0; i < n * H; i++) x[i]! += o[i]!;
      rmsNorm(x, n, H, w.postNorm, c.rmsNormEps, h);
      matmul(h, n, H, w.gate, inter, undefined, g);
      matmul(h, n, H, w.up, inter, undefined, u);
      for (let i = 0; i < n * inter; i++) {
        const a = g[i]!;
        g[i] = (a / (1 + Math.exp(-a))) * u[i]!;
      }
      matmul(g, n, inter, w.down, H, undefined, o);
      for (let i = 0; i < n * H; i++) x[i]! += o[i]!;
    }

    const samples = plan.logitsIndices.length;
    const rowsIn = new Float32Array(samples * H);
    for (let s = 0; s < samples; s++) {
      const t = plan.logitsIndices[s]!;
      rowsIn.set(x.subarray(t * H, (t + 1) * H), s * H);
    }
    const normed = new Float32Array(samples * H);
    rmsNorm(rowsIn, samples, H, this.#w.finalNorm, c.rmsNormEps, normed);
    const logits = new Float32Array(samples * c.vocabSize);
    matmul(normed, samples, H, this.#w.lmHead, c.vocabSize, undefined, logits);
    return logits;
  }

  /** Rotate-half RoPE (HF convention; GGUF checkpoints are un-permuted on load). */
  #rope(buf: Float32Array, offset: number, heads: number, pos: number): void {
    const hd = this.#w.config.headDim;
    const half = hd / 2;
    for (let head = 0; head < heads; head++) {
      const o = offset + head * hd;
      for (let i = 0; i < half; i++) {
        const angle = pos * this.#invFreq[i]!;
        const cos = Math.cos(angle);
        const sin = Math.sin(angle);
        const a = buf[o + i]!;
        const b = buf[o + i + half]!;
        buf[o + i] = a * cos - b * sin;
        buf[o + i + half] = b * cos + a * sin;
      }
    }
  }

  async copyBlocks(copies: readonly BlockCopy[]): Promise<void> {
    const bf = this.#blockFloats;
    for (const cache of this.#cache) {
      for (const { src, dst } of copies) cache.copyWithin(dst * bf, src * bf, (src + 1) * bf);
    }
  }

  async readBlocks(blocks: readonly number[]): Promise<Uint8Array[]> {
    const bf = this.#blockFloats;
    return blocks.map((b) => {
      const out = new Float32Array(bf * this.#cache.length);
      this.#cache.forEach((cache, l) => {
        out.set(cache.subarray(b * bf, (b + 1) * bf), l * bf);
      });
      return new Uint8Array(out.buffer);
    });
  }

  async writeBlocks(blocks: readonly number[], data: readonly Uint8Array[]): Promise<void> {
    const bf = this.#blockFloats;
    blocks.forEach((b, i) => {
      const bytes = data[i]!;
      if (bytes.byteLength !== bf * 4 * this.#cache.length) {
        throw new KvasirAppError(
          'SWAP_LOST',
          `block ${b}: ${bytes.byteLength} bytes, expected ${bf * 4 * this.#cache.length}`,
        );
      }
      // Copy into an aligned array: stores may hand back Node Buffers, whose slice() is a view.
      const copy = new Float32Array(bytes.byteLength / 4);
      new Uint8Array(copy.buffer).set(bytes);
      this.#cache.forEach((cache, l) => {
        cache.set(copy.subarray(l * bf, (l + 1) * bf), b * bf);
      });
    });
  }

  async dispose(): Promise<void> {
    this.#cache.length = 0;
  }
}

/** The engine's text side over a @kvasir/model tokenizer. */
export function codecFor(tokenizer: ModelTokenizer): TextCodec {
  return {
    encode: (text) => tokenizer.encode(text),
    applyChatTemplate: (messages: readonly ChatMessage[]) =>
      tokenizer.encodeChat(messages.map((m) => ({ role: m.role, content: m.content }))),
    decoder: () => tokenizer.createDetokenizer({ skipSpecialTokens: true }),
    tokenText: (id) => tokenizer.decode([id]),
  };
}

/** Opens a checkpoint and its tokenizer (HF directory or `.gguf`). */
export async function openModelFiles(
  path: string,
): Promise<{ reader: CheckpointReader; tokenizer: ModelTokenizer }> {
  const reader = await openCheckpoint(path);
  const tokenizer = await ModelTokenizer.load(path, reader.config.eosTokenIds);
  return { reader, tokenizer };
}
