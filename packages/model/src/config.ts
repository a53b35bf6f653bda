import type { Llama3RopeScaling, RopeConfig } from '@kvasir/attention-kernels';
import { ModelError } from './errors.js';
import {
  gemma3Defaults,
  gemma3FromHf,
  gemma3ToHf,
  validateGemmaFields,
} from './families/gemma3.js';
import { gptOssDefaults, gptOssLayersFromHf, gptOssMoe } from './families/gpt-oss.js';
import {
  type LongRopeScaling,
  longRopeFactors,
  phi3FromHf,
  phi3ToHf,
  validatePhi3Fields,
} from './families/phi3.js';

/**
 * Model families this package runs; all share the Llama block structure. `qwen3` adds a
 * per-head RMSNorm of Q and K before RoPE ({@link ModelConfig.qkNorm}); `smollm3` skips RoPE on
 * every fourth layer ({@link ModelConfig.noRopeLayers}); `gemma3` adds scaled embeddings,
 * GELU-tanh, sandwich norms and interleaved sliding-window layers (the fields below it sets);
 * `qwen3moe` is qwen3 with a mixture of experts in place of every MLP ({@link ModelConfig.moe});
 * `gpt-oss` has attention sinks, biased q/k/v/o, alternating sliding-window layers and experts
 * with biases and OpenAI's clamped SwiGLU (families/gpt-oss.ts).
 * `phi3` (Phi-3.5, Phi-4-mini) rotates only the first {@link ModelConfig.rotaryDim} dims of each
 * head, with LongRoPE's per-pair factors and attention factor (`longrope` scaling,
 * {@link ModelConfig.ropeAttentionFactor}); its fused QKV and gate/up tensors are read as the
 * separate projections.
 */
export type Architecture =
  | 'llama'
  | 'mistral'
  | 'qwen2'
  | 'qwen3'
  | 'smollm3'
  | 'gemma3'
  | 'qwen3moe'
  | 'gpt-oss'
  | 'phi3';

/**
 * A mixture-of-experts MLP (Qwen3 MoE): every layer's MLP is `numExperts` SwiGLU experts of
 * width `expertIntermediateSize` and a router (`mlp.gate`, `[numExperts, hiddenSize]`). Each
 * token goes to the `numExpertsPerToken` experts of highest softmax probability, and their
 * outputs are summed weighted by those probabilities (renormalized to sum to 1 when
 * `normTopkProb`).
 */
export interface MoeConfig {
  readonly numExperts: number;
  readonly numExpertsPerToken: number;
  readonly expertIntermediateSize: number;
  readonly normTopkProb: boolean;
  /**
   * The router and every expert's gate, up and down projections carry biases (gpt-oss).
   * Absent: no biases.
   */
  readonly expertBias?: boolean;
  /**
   * The experts' gated activation: `silu` (SwiGLU, the default) or `swiglu-oai` (gpt-oss:
   * `min(g, 7) · σ(1.702 · min(g, 7)) · (clamp(u, −7, 7) + 1)`).
   */
  readonly activation?: 'silu' | 'swiglu-oai';
}

/** Upper bound of a config's expert count (the largest MoE models have 256 to 384). */
const MAX_EXPERTS = 1 << 12;

/**
 * RoPE frequency scaling.
 *
 * - `linear`: every inverse frequency divided by `factor` (position interpolation).
 * - `llama3`: Llama 3.1's band-wise scaling (high frequencies kept, low ones divided by
 *   `factor`, a smooth ramp between).
 * - `freq-factors`: per-pair divisors given explicitly (what GGUF files carry in their
 *   `rope_freqs` tensor); `factors.length === rotaryDim / 2`.
 * - `longrope`: LongRoPE (Phi-3.5, Phi-4-mini): per-pair divisors, `longFactors` when the
 *   model runs with a context longer than `originalMaxPositionEmbeddings`, else `shortFactors`
 *   (as llama.cpp chooses by its context size; here the context is the config's
 *   `maxPositionEmbeddings`); each list has `rotaryDim / 2` entries.
 */
export type RopeScaling =
  | { readonly type: 'linear'; readonly factor: number }
  | ({ readonly type: 'llama3' } & Llama3RopeScaling)
  | { readonly type: 'freq-factors'; readonly factors: readonly number[] }
  | LongRopeScaling;

/**
 * The normalized configuration of a Llama-family decoder, whatever file it came from.
 * All counts are positive integers; `numHeads % numKvHeads === 0`; `headDim` is even.
 */
export interface ModelConfig {
  /** Model family (decides defaults such as Qwen2's QKV bias). */
  readonly architecture: Architecture;
  /** Residual stream width (`hidden_size`). */
  readonly hiddenSize: number;
  /** MLP inner width (`intermediate_size`). */
  readonly intermediateSize: number;
  /** Decoder layers (`num_hidden_layers`). */
  readonly numLayers: number;
  /** Query heads (`num_attention_heads`). */
  readonly numHeads: number;
  /** Key/value heads (`num_key_value_heads`): equal to `numHeads` for MHA, 1 for MQA. */
  readonly numKvHeads: number;
  /** Per-head dimension (`head_dim`, default `hiddenSize / numHeads`). */
  readonly headDim: number;
  /** Vocabulary rows of the embedding and LM head. */
  readonly vocabSize: number;
  /** RMSNorm epsilon. */
  readonly rmsNormEps: number;
  /** RoPE base. */
  readonly ropeTheta: number;
  /** RoPE frequency scaling, or `null` for plain RoPE. */
  readonly ropeScaling: RopeScaling | null;
  /** Longest context the model was trained for. */
  readonly maxPositionEmbeddings: number;
  /** The LM head reuses the embedding matrix (no `lm_head.weight`). */
  readonly tieWordEmbeddings: boolean;
  /** q/k/v projections carry a bias (Qwen2 always; Llama with `attention_bias`). */
  readonly attentionBias: boolean;
  /** o_proj carries a bias (Llama with `attention_bias`; never Qwen2). */
  readonly attentionOutputBias: boolean;
  /** Sliding-window attention span (Mistral v0.1), or `null` for full attention. */
  readonly slidingWindow: number | null;
  /** Beginning-of-sequence token id, if the model has one. */
  readonly bosTokenId: number | null;
  /** End-of-sequence token ids (Llama 3 instruct models have several). */
  readonly eosTokenIds: readonly number[];
  /**
   * Q and K are RMS-normalized per head (over `headDim`, with learned `q_norm` / `k_norm`
   * weights and `rmsNormEps`) after their projections and before RoPE (Qwen3). Absent: false.
   */
  readonly qkNorm?: boolean;
  /**
   * Layers (ascending indices) whose Q and K get no RoPE at all (SmolLM3's NoPE layers: every
   * fourth). Their keys do not depend on position, so KV compression's key shifts leave them
   * alone. Absent: every layer is rotated.
   */
  readonly noRopeLayers?: readonly number[];
  /** Token embeddings are multiplied by this before the first layer (Gemma: `sqrt(hiddenSize)`). */
  readonly embeddingScale?: number;
  /**
   * The gated MLP's activation: `silu` (SwiGLU, the default) or `gelu-tanh` (GeGLU with GELU's
   * tanh approximation, Gemma).
   */
  readonly mlpActivation?: 'silu' | 'gelu-tanh';
  /**
   * Attention's and the MLP's outputs are RMS-normalized before their residual adds (Gemma's
   * `post_attention_layernorm` / `post_feedforward_layernorm`; its pre-MLP norm is
   * `pre_feedforward_layernorm`).
   */
  readonly sandwichNorms?: boolean;
  /** Multiplier of `q·k` (Gemma 3: `query_pre_attn_scalar^-1/2`). Absent: `1 / sqrt(headDim)`. */
  readonly attentionScale?: number;
  /**
   * Layers (ascending model indices) whose attention sees only the last `slidingWindow`
   * positions, the query's own included (Gemma 3's local layers); the others see the whole
   * context. Absent: every layer sees the whole context (`slidingWindow` is then only recorded).
   */
  readonly slidingWindowLayers?: readonly number[];
  /**
   * RoPE base of the sliding-window layers, which take no RoPE scaling (Gemma 3's local base);
   * the other layers keep `ropeTheta` and `ropeScaling`. Absent: every layer rotates alike.
   */
  readonly localRopeTheta?: number;
  /** When set, logits become `tanh(l / cap) · cap` (a final logit soft cap). */
  readonly finalLogitSoftcap?: number;
  /** Every layer's MLP is a mixture of experts (`qwen3moe`, `gpt-oss`). Absent: dense MLPs. */
  readonly moe?: MoeConfig;
  /**
   * Every layer has a learned logit per query head (`self_attn.sinks.weight`, `[numHeads]`)
   * that joins the softmax's denominator as one more key with no value (gpt-oss), so a head
   * may attend to nothing. Absent: false.
   */
  readonly attentionSinks?: boolean;
  /**
   * Leading dims of each head that RoPE rotates (even, at most `headDim`; Phi-4-mini: 3/4 of
   * the head); the rest pass through unrotated. Absent: the whole head.
   */
  readonly rotaryDim?: number;
  /**
   * LongRoPE's attention factor `m` (Phi-3.5 / Phi-4-mini: `sqrt(1 + ln(s) / ln(original))`
   * for a context extension `s`): llama.cpp and transformers multiply the rotated dims' cos and
   * sin by it, so those dims of `q·k` grow by `m²`. Here the rotated dims of Q are multiplied by
   * `m²` and K is rotated plainly, which is the same product and keeps the cached keys plain
   * RoPE (what KV compression's key shifts re-rotate). Absent: 1.
   */
  readonly ropeAttentionFactor?: number;
}

/** Name, shape (row-major, HF order: `[out, in]` for projections) of one expected tensor. */
export interface ExpectedTensor {
  /** Canonical Hugging Face name, e.g. `model.layers.0.self_attn.q_proj.weight`. */
  readonly name: string;
  /** Shape in HF (PyTorch) order. */
  readonly shape: readonly number[];
}

/** The integer sizes of a {@link ModelConfig}. */
type ConfigSize =
  | 'hiddenSize'
  | 'intermediateSize'
  | 'numLayers'
  | 'numHeads'
  | 'numKvHeads'
  | 'headDim'
  | 'vocabSize'
  | 'maxPositionEmbeddings';

/**
 * Upper bounds of a config's sizes, far above every model this package runs (the largest
 * Llama-family models have 126 layers, a hidden size of 16,384, 128 heads of 128 or 256 dims,
 * 256k tokens and 10M positions). A file claiming more is corrupt: refusing it up front keeps a
 * wrong count (a layer count of 2^31) from building per-layer tables for minutes before any
 * tensor is checked.
 * @internal
 */
export const MODEL_CONFIG_LIMITS: Readonly<Record<ConfigSize, number>> = {
  hiddenSize: 1 << 17,
  intermediateSize: 1 << 20,
  numLayers: 1 << 12,
  numHeads: 1 << 12,
  numKvHeads: 1 << 12,
  headDim: 1 << 12,
  vocabSize: 1 << 24,
  maxPositionEmbeddings: 1 << 24,
};

const ARCH_BY_HF: Record<string, Architecture> = {
  LlamaForCausalLM: 'llama',
  MistralForCausalLM: 'mistral',
  Qwen2ForCausalLM: 'qwen2',
  Qwen3ForCausalLM: 'qwen3',
  SmolLM3ForCausalLM: 'smollm3',
  Gemma3ForCausalLM: 'gemma3',
  Qwen3MoeForCausalLM: 'qwen3moe',
  GptOssForCausalLM: 'gpt-oss',
  Phi3ForCausalLM: 'phi3',
};
const ARCH_BY_MODEL_TYPE: Record<string, Architecture> = {
  llama: 'llama',
  mistral: 'mistral',
  qwen2: 'qwen2',
  qwen3: 'qwen3',
  smollm3: 'smollm3',
  gemma3_text: 'gemma3',
  qwen3_moe: 'qwen3moe',
  qwen3moe: 'qwen3moe',
  gpt_oss: 'gpt-oss',
  phi3: 'phi3',
};

/** SmolLM3's NoPE layers: every `interval`-th (1-based), as llama.cpp and transformers place them. */
export function everyNthNoRope(numLayers: number, interval = 4): number[] {
  const out: number[] = [];
  for (let l = 0; l < numLayers; l++) if ((l + 1) % interval === 0) out.push(l);
  return out;
}

function bad(message: string, details?: Record<string, unknown>): ModelError {
  return new ModelError('INVALID_CONFIG', message, details ? { details } : undefined);
}

function readInt(
  obj: Record<string, unknown>,
  key: string,
  fallback?: number,
  limit = Number.MAX_SAFE_INTEGER,
): number {
  const v = obj[key];
  if (v === undefined || v === null) {
    if (fallback !== undefined) return fallback;
    throw bad(`config.json: "${key}" is missing`, { key });
  }
  if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0) {
    throw bad(`config.json: "${key}" must be a positive integer, got ${JSON.stringify(v)}`, {
      key,
      value: v,
    });
  }
  if (v > limit) {
    throw bad(`config.json: "${key}" is ${v}, above the limit of ${limit}`, {
      key,
      value: v,
      limit,
    });
  }
  return v;
}

function readNum(obj: Record<string, unknown>, key: string, fallback: number): number {
  const v = obj[key];
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) {
    throw bad(`config.json: "${key}" must be a positive number, got ${JSON.stringify(v)}`, {
      key,
      value: v,
    });
  }
  return v;
}

function readBool(obj: Record<string, unknown>, key: string, fallback: boolean): boolean {
  const v = obj[key];
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'boolean') {
    throw bad(`config.json: "${key}" must be a boolean, got ${JSON.stringify(v)}`, { key });
  }
  return v;
}

function readTokenIds(v: unknown, key: string): number[] {
  if (v === undefined || v === null) return [];
  const list = Array.isArray(v) ? v : [v];
  for (const id of list) {
    if (typeof id !== 'number' || !Number.isInteger(id) || id < 0) {
      throw bad(`config.json: "${key}" must be a token id or a list of them`, { key, value: v });
    }
  }
  return list as number[];
}

function parseRopeScaling(v: unknown): RopeScaling | null {
  if (v === undefined || v === null) return null;
  if (typeof v !== 'object' || Array.isArray(v))
    throw bad('config.json: "rope_scaling" must be an object');
  const r = v as Record<string, unknown>;
  const kind = r.rope_type ?? r.type;
  if (kind === 'default') return null;
  if (kind === 'linear') return { type: 'linear', factor: readNum(r, 'factor', Number.NaN) };
  if (kind === 'llama3') {
    const scaling: RopeScaling = {
      type: 'llama3',
      factor: readNum(r, 'factor', Number.NaN),
      lowFreqFactor: readNum(r, 'low_freq_factor', Number.NaN),
      highFreqFactor: readNum(r, 'high_freq_factor', Number.NaN),
      originalMaxPositionEmbeddings: readInt(r, 'original_max_position_embeddings'),
    };
    for (const [k, val] of Object.entries(scaling)) {
      if (typeof val === 'number' && Number.isNaN(val)) {
        throw bad(`config.json: rope_scaling (llama3) lacks "${k}"`, { key: k });
      }
    }
    if (scaling.highFreqFactor <= scaling.lowFreqFactor) {
      throw bad('config.json: rope_scaling high_freq_factor must exceed low_freq_factor');
    }
    return scaling;
  }
  throw new ModelError(
    'UNSUPPORTED_ARCHITECTURE',
    `config.json: rope_scaling type ${JSON.stringify(kind)} is not supported (supported: linear, llama3)`,
    { details: { ropeScaling: v } },
  );
}

/**
 * Parses and validates a Hugging Face `config.json` of a Llama-family model (Llama 2/3/3.1/3.2,
 * Mistral, Qwen2/2.5, Qwen3, SmolLM 1-3, TinyLlama) into a {@link ModelConfig}.
 *
 * @param json - the parsed `config.json` object.
 * @throws {@link ModelError} `UNSUPPORTED_ARCHITECTURE` for other model types, activations or
 *   RoPE scalings; `INVALID_CONFIG` for missing or out-of-range fields.
 */
export function parseHfConfig(json: unknown): ModelConfig {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) {
    throw bad('config.json must be a JSON object');
  }
  const c = json as Record<string, unknown>;
  const archs = Array.isArray(c.architectures) ? (c.architectures as unknown[]) : [];
  let architecture: Architecture | undefined;
  for (const a of archs) if (typeof a === 'string' && ARCH_BY_HF[a]) architecture = ARCH_BY_HF[a];
  if (!architecture && typeof c.model_type === 'string') {
    architecture = ARCH_BY_MODEL_TYPE[c.model_type];
  }
  if (!architecture) {
    throw new ModelError(
      'UNSUPPORTED_ARCHITECTURE',
      `config.json: unsupported model (architectures ${JSON.stringify(c.architectures)}, model_type ${JSON.stringify(c.model_type)}); supported: ${Object.keys(ARCH_BY_HF).join(', ')}`,
      { details: { architectures: c.architectures, modelType: c.model_type } },
    );
  }
  const act = c.hidden_act ?? c.hidden_activation ?? 'silu';
  if (act !== 'silu' && architecture !== 'gemma3') {
    throw new ModelError(
      'UNSUPPORTED_ARCHITECTURE',
      `config.json: hidden_act ${JSON.stringify(act)} is not supported (only silu)`,
    );
  }
  if (readBool(c, 'mlp_bias', false)) {
    throw new ModelError('UNSUPPORTED_ARCHITECTURE', 'config.json: mlp_bias is not supported');
  }
  const L = MODEL_CONFIG_LIMITS;
  const hiddenSize = readInt(c, 'hidden_size', undefined, L.hiddenSize);
  const numHeads = readInt(c, 'num_attention_heads', undefined, L.numHeads);
  const numKvHeads = readInt(c, 'num_key_value_heads', numHeads, L.numKvHeads);
  const headDim = readInt(c, 'head_dim', Math.floor(hiddenSize / numHeads), L.headDim);
  let slidingWindow: number | null = null;
  if ((architecture === 'mistral' || architecture === 'phi3') && c.sliding_window != null) {
    slidingWindow = readInt(c, 'sliding_window');
  }
  if (
    (architecture === 'qwen2' || architecture === 'qwen3' || architecture === 'qwen3moe') &&
    readBool(c, 'use_sliding_window', false) &&
    c.sliding_window != null
  ) {
    slidingWindow = readInt(c, 'sliding_window');
  }
  const llamaBias = readBool(c, 'attention_bias', false);
  const numLayers = readInt(c, 'num_hidden_layers', undefined, L.numLayers);
  const gemma =
    architecture === 'gemma3' ? gemma3FromHf(c, numLayers, hiddenSize, headDim) : undefined;
  if (gemma) slidingWindow = gemma.slidingWindow;
  const maxPositionEmbeddings = readInt(
    c,
    'max_position_embeddings',
    2048,
    L.maxPositionEmbeddings,
  );
  const phi = architecture === 'phi3' ? phi3FromHf(c, headDim, maxPositionEmbeddings) : undefined;
  const config: ModelConfig = {
    architecture,
    hiddenSize,
    intermediateSize: readInt(c, 'intermediate_size', undefined, L.intermediateSize),
    numLayers,
    numHeads,
    numKvHeads,
    headDim,
    vocabSize: readInt(c, 'vocab_size', undefined, L.vocabSize),
    rmsNormEps: readNum(c, 'rms_norm_eps', 1e-6),
    ropeTheta: readNum(c, 'rope_theta', 10000),
    ropeScaling: phi ? (phi.ropeScaling ?? null) : parseRopeScaling(c.rope_scaling),
    maxPositionEmbeddings,
    tieWordEmbeddings: readBool(c, 'tie_word_embeddings', false),
    attentionBias: architecture === 'qwen2' ? true : llamaBias,
    attentionOutputBias: architecture === 'qwen2' ? false : llamaBias,
    slidingWindow,
    bosTokenId: readTokenIds(c.bos_token_id, 'bos_token_id')[0] ?? null,
    eosTokenIds: readTokenIds(c.eos_token_id, 'eos_token_id'),
    ...(architecture === 'qwen3' ? { qkNorm: true } : {}),
    ...(architecture === 'smollm3' ? { noRopeLayers: smolNoRopeLayers(c, numLayers) } : {}),
    ...gemma,
    ...(gemma ? { tieWordEmbeddings: readBool(c, 'tie_word_embeddings', true) } : {}),
    ...(architecture === 'qwen3moe' ? { qkNorm: true, moe: hfMoe(c, numLayers) } : {}),
    ...(architecture === 'gpt-oss' ? gptOssFromHf(c, numLayers) : {}),
    ...(phi?.rotaryDim !== undefined ? { rotaryDim: phi.rotaryDim } : {}),
    ...(phi?.ropeAttentionFactor !== undefined
      ? { ropeAttentionFactor: phi.ropeAttentionFactor }
      : {}),
  };
  validateModelConfig(config);
  return config;
}

/** gpt-oss's fields from `config.json` (sliding window, layer types, experts). */
function gptOssFromHf(c: Record<string, unknown>, numLayers: number): Partial<ModelConfig> {
  const limit = readNum(c, 'swiglu_limit', 7);
  if (limit !== 7) {
    throw new ModelError(
      'UNSUPPORTED_ARCHITECTURE',
      `config.json: swiglu_limit ${limit} is not supported (llama.cpp and this package fix it at 7)`,
      { details: { key: 'swiglu_limit' } },
    );
  }
  return {
    ...gptOssDefaults(numLayers),
    slidingWindow: readInt(c, 'sliding_window'),
    slidingWindowLayers: gptOssLayersFromHf(c.layer_types, numLayers),
    moe: gptOssMoe(
      readInt(c, 'num_local_experts', undefined, MAX_EXPERTS),
      readInt(c, 'num_experts_per_tok', undefined, MAX_EXPERTS),
      readInt(c, 'intermediate_size', undefined, MODEL_CONFIG_LIMITS.intermediateSize),
    ),
  };
}

/**
 * Qwen3 MoE's experts from `config.json`. Every layer must be sparse (`decoder_sparse_step` 1,
 * no `mlp_only_layers`), as in every released Qwen3 MoE model and as llama.cpp runs them.
 */
function hfMoe(c: Record<string, unknown>, numLayers: number): MoeConfig {
  const step = readInt(c, 'decoder_sparse_step', 1);
  const dense = c.mlp_only_layers;
  if (step !== 1 || (Array.isArray(dense) && dense.length > 0)) {
    throw new ModelError(
      'UNSUPPORTED_ARCHITECTURE',
      `config.json: Qwen3 MoE with dense MLP layers (decoder_sparse_step ${step}, mlp_only_layers ${JSON.stringify(dense ?? [])}) is not supported: every one of the ${numLayers} layers must be a mixture of experts`,
      { details: { key: step !== 1 ? 'decoder_sparse_step' : 'mlp_only_layers' } },
    );
  }
  return {
    numExperts: readInt(c, 'num_experts', undefined, MAX_EXPERTS),
    numExpertsPerToken: readInt(c, 'num_experts_per_tok', undefined, MAX_EXPERTS),
    expertIntermediateSize: readInt(
      c,
      'moe_intermediate_size',
      undefined,
      MODEL_CONFIG_LIMITS.intermediateSize,
    ),
    normTopkProb: readBool(c, 'norm_topk_prob', false),
  };
}

/**
 * SmolLM3's `no_rope_layers` (one flag per layer, 1 = RoPE, 0 = NoPE), or every
 * `no_rope_layer_interval`-th layer (default 4) when the list is absent.
 */
function smolNoRopeLayers(c: Record<string, unknown>, numLayers: number): number[] {
  const flags = c.no_rope_layers;
  if (flags === undefined || flags === null) {
    return everyNthNoRope(numLayers, readInt(c, 'no_rope_layer_interval', 4));
  }
  if (
    !Array.isArray(flags) ||
    flags.length !== numLayers ||
    !flags.every((f) => f === 0 || f === 1)
  ) {
    throw bad(
      `config.json: "no_rope_layers" must list one 0 or 1 per layer (${numLayers} layers)`,
      { key: 'no_rope_layers' },
    );
  }
  const out: number[] = [];
  flags.forEach((f, l) => {
    if (f === 0) out.push(l);
  });
  return out;
}

/**
 * Checks the invariants of a {@link ModelConfig} (positive integer sizes below generous limits,
 * at most 4,096 layers, heads and head dims, head grouping, even head dim, RoPE scaling fields).
 *
 * @throws {@link ModelError} `INVALID_CONFIG` naming the first violated rule.
 */
export function validateModelConfig(c: ModelConfig): void {
  for (const [k, limit] of Object.entries(MODEL_CONFIG_LIMITS) as [ConfigSize, number][]) {
    const v = c[k];
    if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0) {
      throw bad(`model config: ${k} must be a positive integer, got ${String(v)}`, { key: k });
    }
    if (v > limit) {
      throw bad(`model config: ${k} is ${v}, above the limit of ${limit}`, {
        key: k,
        value: v,
        limit,
      });
    }
  }
  if (!Object.values(ARCH_BY_MODEL_TYPE).includes(c.architecture)) {
    throw new ModelError(
      'UNSUPPORTED_ARCHITECTURE',
      `model config: unknown architecture ${String(c.architecture)}`,
    );
  }
  if (c.numHeads % c.numKvHeads !== 0) {
    throw bad(
      `model config: num_attention_heads (${c.numHeads}) must be a multiple of num_key_value_heads (${c.numKvHeads})`,
    );
  }
  if (c.headDim % 2 !== 0) throw bad(`model config: head_dim (${c.headDim}) must be even for RoPE`);
  if (!(c.rmsNormEps > 0)) throw bad('model config: rms_norm_eps must be positive');
  if (!(c.ropeTheta > 1 && Number.isFinite(c.ropeTheta))) {
    throw bad(`model config: rope_theta must be finite and above 1, got ${c.ropeTheta}`);
  }
  if (c.slidingWindow !== null && (!Number.isInteger(c.slidingWindow) || c.slidingWindow <= 0)) {
    throw bad('model config: sliding_window must be a positive integer or null');
  }
  if (c.bosTokenId !== null && (c.bosTokenId < 0 || c.bosTokenId >= c.vocabSize)) {
    throw bad(
      `model config: bos_token_id ${c.bosTokenId} is outside the vocabulary (${c.vocabSize})`,
    );
  }
  for (const e of c.eosTokenIds) {
    if (!Number.isInteger(e) || e < 0 || e >= c.vocabSize) {
      throw bad(`model config: eos_token_id ${e} is outside the vocabulary (${c.vocabSize})`);
    }
  }
  if (c.noRopeLayers !== undefined) {
    let prev = -1;
    for (const l of c.noRopeLayers) {
      if (!(Number.isInteger(l) && l > prev && l < c.numLayers)) {
        throw bad(
          `model config: noRopeLayers must be ascending layer indices below ${c.numLayers}`,
          { noRopeLayers: c.noRopeLayers },
        );
      }
      prev = l;
    }
  }
  validateGemmaFields(c);
  validateMoe(c);
  if (c.attentionSinks && c.architecture !== 'gpt-oss') {
    throw bad(`model config: ${c.architecture} has no attention sinks`);
  }
  validatePhi3Fields(c);
  const s = c.ropeScaling;
  const pairs = (c.rotaryDim ?? c.headDim) / 2;
  if (s?.type === 'freq-factors' && s.factors.length !== pairs) {
    throw bad(
      `model config: rope freq factors have ${s.factors.length} entries, rotary dim / 2 is ${pairs}`,
    );
  }
  const factors =
    s?.type === 'longrope'
      ? [...s.shortFactors, ...s.longFactors]
      : s?.type === 'freq-factors'
        ? s.factors
        : s?.type === 'llama3'
          ? [
              s.factor,
              s.lowFreqFactor,
              s.highFreqFactor - s.lowFreqFactor,
              s.originalMaxPositionEmbeddings,
            ]
          : s
            ? [s.factor]
            : [];
  // What @kvasir/attention-kernels' RoPE accepts, refused here as a config error.
  if (!factors.every((f) => f > 0 && Number.isFinite(f))) {
    throw bad('model config: rope scaling factors must be finite and positive', {
      ropeScaling: s,
    });
  }
}

/** A `qwen3moe` config has experts (and only it), at most 4,096, top-k within them. */
function validateMoe(c: ModelConfig): void {
  const m = c.moe;
  const moeArch = c.architecture === 'qwen3moe' || c.architecture === 'gpt-oss';
  if ((m !== undefined) !== moeArch) {
    throw bad(
      m
        ? `model config: ${c.architecture} has no mixture of experts`
        : `model config: ${c.architecture} needs its experts (moe)`,
    );
  }
  if (m === undefined) return;
  const sizes: [string, number, number][] = [
    ['numExperts', m.numExperts, MAX_EXPERTS],
    ['numExpertsPerToken', m.numExpertsPerToken, m.numExperts],
    ['expertIntermediateSize', m.expertIntermediateSize, MODEL_CONFIG_LIMITS.intermediateSize],
  ];
  for (const [k, v, limit] of sizes) {
    if (!Number.isInteger(v) || v <= 0 || v > limit) {
      throw bad(`model config: moe.${k} is ${v}; it must be a positive integer up to ${limit}`, {
        key: `moe.${k}`,
        value: v,
        limit,
      });
    }
  }
  if (typeof m.normTopkProb !== 'boolean')
    throw bad('model config: moe.normTopkProb must be a boolean');
  const oai = c.architecture === 'gpt-oss';
  if ((m.expertBias ?? false) !== oai || (m.activation === 'swiglu-oai') !== oai) {
    throw bad(
      oai
        ? 'model config: gpt-oss experts have biases and the swiglu-oai activation'
        : `model config: ${c.architecture} experts have no biases and use SiLU`,
    );
  }
}

/**
 * Builds and validates a {@link ModelConfig} from a partial one, filling Llama defaults (and
 * the family's own: Qwen3's Q/K norm, SmolLM3's NoPE on every fourth layer).
 * Handy for tests and synthetic checkpoints.
 *
 * @throws {@link ModelError} `INVALID_CONFIG` when the result is inconsistent.
 */
export function makeModelConfig(
  partial: Partial<ModelConfig> &
    Pick<ModelConfig, 'hiddenSize' | 'intermediateSize' | 'numLayers' | 'numHeads' | 'vocabSize'>,
): ModelConfig {
  const numHeads = partial.numHeads;
  const architecture = partial.architecture ?? 'llama';
  const config: ModelConfig = {
    architecture,
    numKvHeads: numHeads,
    headDim: Math.floor(partial.hiddenSize / numHeads),
    rmsNormEps: 1e-5,
    ropeTheta: 10000,
    ropeScaling: null,
    maxPositionEmbeddings: 2048,
    tieWordEmbeddings: false,
    attentionBias: architecture === 'qwen2',
    attentionOutputBias: false,
    slidingWindow: null,
    bosTokenId: null,
    eosTokenIds: [],
    ...(architecture === 'qwen3' ? { qkNorm: true } : {}),
    ...(architecture === 'smollm3' ? { noRopeLayers: everyNthNoRope(partial.numLayers) } : {}),
    ...(architecture === 'gemma3' ? gemma3Defaults(partial.numLayers, partial.hiddenSize) : {}),
    ...(architecture === 'qwen3moe' ? { qkNorm: true } : {}),
    ...(architecture === 'gpt-oss' ? gptOssDefaults(partial.numLayers) : {}),
    ...partial,
  };
  validateModelConfig(config);
  return config;
}

/**
 * Serializes a {@link ModelConfig} as a Hugging Face `config.json` object that
 * {@link parseHfConfig} (and transformers) read back to the same config.
 *
 * @throws {@link ModelError} `INVALID_CONFIG` for `freq-factors` RoPE scaling (HF has no form for it).
 */
export function toHfConfig(c: ModelConfig): Record<string, unknown> {
  const hfArch = {
    llama: 'LlamaForCausalLM',
    mistral: 'MistralForCausalLM',
    qwen2: 'Qwen2ForCausalLM',
    qwen3: 'Qwen3ForCausalLM',
    smollm3: 'SmolLM3ForCausalLM',
    gemma3: 'Gemma3ForCausalLM',
    qwen3moe: 'Qwen3MoeForCausalLM',
    'gpt-oss': 'GptOssForCausalLM',
    phi3: 'Phi3ForCausalLM',
  }[c.architecture];
  let ropeScaling: Record<string, unknown> | null = null;
  const s = c.ropeScaling;
  if (s?.type === 'linear') ropeScaling = { rope_type: 'linear', factor: s.factor };
  if (s?.type === 'llama3') {
    ropeScaling = {
      rope_type: 'llama3',
      factor: s.factor,
      low_freq_factor: s.lowFreqFactor,
      high_freq_factor: s.highFreqFactor,
      original_max_position_embeddings: s.originalMaxPositionEmbeddings,
    };
  }
  if (s?.type === 'freq-factors') {
    throw bad('model config: explicit RoPE frequency factors have no config.json form');
  }
  if (s?.type === 'longrope' && c.architecture !== 'phi3') {
    throw bad(`model config: ${hfArch} config.json has no LongRoPE form`);
  }
  const out: Record<string, unknown> = {
    architectures: [hfArch],
    model_type:
      c.architecture === 'qwen3moe'
        ? 'qwen3_moe'
        : c.architecture === 'gpt-oss'
          ? 'gpt_oss'
          : c.architecture,
    hidden_act: 'silu',
    hidden_size: c.hiddenSize,
    intermediate_size: c.intermediateSize,
    num_hidden_layers: c.numLayers,
    num_attention_heads: c.numHeads,
    num_key_value_heads: c.numKvHeads,
    head_dim: c.headDim,
    vocab_size: c.vocabSize,
    rms_norm_eps: c.rmsNormEps,
    rope_theta: c.ropeTheta,
    rope_scaling: ropeScaling,
    max_position_embeddings: c.maxPositionEmbeddings,
    tie_word_embeddings: c.tieWordEmbeddings,
    bos_token_id: c.bosTokenId,
    eos_token_id: c.eosTokenIds.length === 1 ? c.eosTokenIds[0] : [...c.eosTokenIds],
    torch_dtype: 'float32',
  };
  if (c.architecture === 'llama') {
    if (c.attentionBias !== c.attentionOutputBias) {
      throw bad('model config: Llama config.json cannot express a QKV bias without an o_proj bias');
    }
    out.attention_bias = c.attentionBias;
    out.mlp_bias = false;
  } else if (c.architecture === 'qwen2') {
    if (!c.attentionBias || c.attentionOutputBias) {
      throw bad('model config: Qwen2 always has QKV bias and no o_proj bias');
    }
    out.use_sliding_window = c.slidingWindow !== null;
    out.sliding_window = c.slidingWindow;
  } else if (c.architecture === 'gemma3') {
    gemma3ToHf(c, out);
    out.model_type = 'gemma3_text';
  } else if (c.architecture === 'gpt-oss') {
    gptOssToHf(c, out);
  } else if (c.architecture === 'phi3') {
    if (c.attentionBias || c.attentionOutputBias)
      throw bad('model config: Phi-3 has no attention bias');
    out.sliding_window = c.slidingWindow;
    phi3ToHf(c, out);
  } else if (c.architecture === 'mistral') {
    if (c.attentionBias || c.attentionOutputBias)
      throw bad('model config: Mistral has no attention bias');
    out.sliding_window = c.slidingWindow;
  } else {
    // Qwen3 and SmolLM3 take Llama's attention_bias (one flag for q/k/v and o).
    if (c.attentionBias !== c.attentionOutputBias) {
      throw bad(
        `model config: ${hfArch} config.json cannot express a QKV bias without an o_proj bias`,
      );
    }
    out.attention_bias = c.attentionBias;
    if (c.architecture === 'qwen3' || c.architecture === 'qwen3moe') {
      if (!c.qkNorm) throw bad('model config: Qwen3 always normalizes Q and K per head');
      out.use_sliding_window = c.slidingWindow !== null;
      out.sliding_window = c.slidingWindow;
      if (c.moe) {
        out.num_experts = c.moe.numExperts;
        out.num_experts_per_tok = c.moe.numExpertsPerToken;
        out.moe_intermediate_size = c.moe.expertIntermediateSize;
        out.norm_topk_prob = c.moe.normTopkProb;
        out.decoder_sparse_step = 1;
        out.mlp_only_layers = [];
      }
    } else {
      if (c.qkNorm) throw bad('model config: SmolLM3 has no Q/K norm');
      const nope = new Set(c.noRopeLayers ?? []);
      out.no_rope_layers = Array.from({ length: c.numLayers }, (_, l) => (nope.has(l) ? 0 : 1));
    }
  }
  if (
    c.architecture !== 'qwen3' &&
    c.architecture !== 'gemma3' &&
    c.architecture !== 'qwen3moe' &&
    c.qkNorm
  ) {
    throw bad(`model config: ${hfArch} has no Q/K norm`);
  }
  if (c.architecture !== 'smollm3' && (c.noRopeLayers?.length ?? 0) > 0) {
    throw bad(`model config: ${hfArch} has no NoPE layers`);
  }
  if (
    c.architecture !== 'phi3' &&
    ((c.rotaryDim ?? c.headDim) !== c.headDim || (c.ropeAttentionFactor ?? 1) !== 1)
  ) {
    throw bad(
      `model config: ${hfArch} config.json has no partial rotary or LongRoPE attention factor`,
    );
  }
  return out;
}

/** gpt-oss's config.json fields (transformers' GptOssConfig). */
function gptOssToHf(c: ModelConfig, out: Record<string, unknown>): void {
  const m = c.moe as MoeConfig;
  if (!c.attentionBias || !c.attentionOutputBias || !c.attentionSinks) {
    throw bad('model config: gpt-oss always has attention biases and sinks');
  }
  const sliding = new Set(c.slidingWindowLayers ?? []);
  Object.assign(out, {
    attention_bias: true,
    intermediate_size: m.expertIntermediateSize,
    num_local_experts: m.numExperts,
    num_experts_per_tok: m.numExpertsPerToken,
    sliding_window: c.slidingWindow,
    layer_types: Array.from({ length: c.numLayers }, (_, l) =>
      sliding.has(l) ? 'sliding_attention' : 'full_attention',
    ),
    swiglu_limit: 7,
  });
}

/**
 * The tensors a checkpoint of this config must hold, with canonical HF names and shapes
 * (`lm_head.weight` only when embeddings are untied).
 */
export function expectedTensors(c: ModelConfig): ExpectedTensor[] {
  const h = c.hiddenSize;
  const q = c.numHeads * c.headDim;
  const kv = c.numKvHeads * c.headDim;
  const out: ExpectedTensor[] = [{ name: 'model.embed_tokens.weight', shape: [c.vocabSize, h] }];
  for (let l = 0; l < c.numLayers; l++) {
    const p = `model.layers.${l}.`;
    out.push({ name: `${p}input_layernorm.weight`, shape: [h] });
    out.push({ name: `${p}self_attn.q_proj.weight`, shape: [q, h] });
    out.push({ name: `${p}self_attn.k_proj.weight`, shape: [kv, h] });
    out.push({ name: `${p}self_attn.v_proj.weight`, shape: [kv, h] });
    if (c.attentionBias) {
      out.push({ name: `${p}self_attn.q_proj.bias`, shape: [q] });
      out.push({ name: `${p}self_attn.k_proj.bias`, shape: [kv] });
      out.push({ name: `${p}self_attn.v_proj.bias`, shape: [kv] });
    }
    out.push({ name: `${p}self_attn.o_proj.weight`, shape: [h, q] });
    if (c.attentionOutputBias) out.push({ name: `${p}self_attn.o_proj.bias`, shape: [h] });
    if (c.attentionSinks) out.push({ name: `${p}self_attn.sinks.weight`, shape: [c.numHeads] });
    if (c.qkNorm) {
      out.push({ name: `${p}self_attn.q_norm.weight`, shape: [c.headDim] });
      out.push({ name: `${p}self_attn.k_norm.weight`, shape: [c.headDim] });
    }
    out.push({ name: `${p}post_attention_layernorm.weight`, shape: [h] });
    if (c.sandwichNorms) {
      out.push({ name: `${p}pre_feedforward_layernorm.weight`, shape: [h] });
      out.push({ name: `${p}post_feedforward_layernorm.weight`, shape: [h] });
    }
    if (c.moe) {
      const ff = c.moe.expertIntermediateSize;
      const bias = c.moe.expertBias ?? false;
      out.push({ name: `${p}mlp.gate.weight`, shape: [c.moe.numExperts, h] });
      if (bias) out.push({ name: `${p}mlp.gate.bias`, shape: [c.moe.numExperts] });
      for (let e = 0; e < c.moe.numExperts; e++) {
        const x = `${p}mlp.experts.${e}.`;
        out.push({ name: `${x}gate_proj.weight`, shape: [ff, h] });
        out.push({ name: `${x}up_proj.weight`, shape: [ff, h] });
        out.push({ name: `${x}down_proj.weight`, shape: [h, ff] });
        if (bias) {
          out.push({ name: `${x}gate_proj.bias`, shape: [ff] });
          out.push({ name: `${x}up_proj.bias`, shape: [ff] });
          out.push({ name: `${x}down_proj.bias`, shape: [h] });
        }
      }
      continue;
    }
    out.push({ name: `${p}mlp.gate_proj.weight`, shape: [c.intermediateSize, h] });
    out.push({ name: `${p}mlp.up_proj.weight`, shape: [c.intermediateSize, h] });
    out.push({ name: `${p}mlp.down_proj.weight`, shape: [h, c.intermediateSize] });
  }
  out.push({ name: 'model.norm.weight', shape: [h] });
  if (!c.tieWordEmbeddings) out.push({ name: 'lm_head.weight', shape: [c.vocabSize, h] });
  return out;
}

/**
 * The RoPE of a config as `@kvasir/attention-kernels` computes it (rotate-half, the HF
 * convention; its `ropeInvFrequencies` / `ropeTables` / `applyRopeReference` are the one
 * implementation): Llama-3 scaling as `scaling`, linear scaling and GGUF's explicit per-pair
 * factors as `freqFactors`.
 *
 * @param maxPosition - positions the tables must cover (their row count).
 */
export function ropeConfig(c: ModelConfig, maxPosition: number): RopeConfig {
  const s = c.ropeScaling;
  const rot = c.rotaryDim ?? c.headDim;
  const base: RopeConfig = {
    numQHeads: c.numHeads,
    numKvHeads: c.numKvHeads,
    headDim: c.headDim,
    ...(rot !== c.headDim ? { rotaryDim: rot } : {}),
    style: 'rotate-half',
    theta: c.ropeTheta,
    maxPosition,
  };
  if (s?.type === 'llama3') {
    const { type: _, ...scaling } = s;
    return { ...base, scaling };
  }
  if (s?.type === 'linear') return { ...base, freqFactors: Array(rot / 2).fill(s.factor) };
  if (s?.type === 'freq-factors') return { ...base, freqFactors: s.factors };
  if (s?.type === 'longrope') {
    return { ...base, freqFactors: longRopeFactors(s, c.maxPositionEmbeddings) };
  }
  return base;
}

/**
 * The config run with a context of `contextLength` positions (`kvasir serve --max-model-len`,
 * llama.cpp's `-c`): with LongRoPE, `maxPositionEmbeddings` becomes the context, so
 * {@link ropeConfig} takes the short factors when it is within the original context, as
 * llama.cpp does. Other configs, and a context at or past `maxPositionEmbeddings`, are returned
 * as they are.
 */
export function withContextLength(c: ModelConfig, contextLength: number | undefined): ModelConfig {
  if (c.ropeScaling?.type !== 'longrope' || contextLength === undefined) return c;
  if (!(Number.isInteger(contextLength) && contextLength > 0)) return c;
  return contextLength < c.maxPositionEmbeddings
    ? { ...c, maxPositionEmbeddings: contextLength }
    : c;
}

/**
 * What the rotated dims of Q are multiplied by after RoPE: LongRoPE's attention factor squared
 * (see {@link ModelConfig.ropeAttentionFactor}), 1 without one.
 */
export function ropeQueryScale(c: ModelConfig): number {
  const m = c.ropeAttentionFactor ?? 1;
  return m * m;
}

/**
 * The RoPE of layer `l` (model index): the sliding-window layers' own base without scaling when
 * the config has {@link ModelConfig.localRopeTheta}, otherwise {@link ropeConfig}.
 */
export function layerRopeConfig(c: ModelConfig, l: number, maxPosition: number): RopeConfig {
  return usesLocalRope(c, l)
    ? ropeConfig({ ...c, ropeTheta: c.localRopeTheta as number, ropeScaling: null }, maxPosition)
    : ropeConfig(c, maxPosition);
}

/** Whether layer `l` takes the sliding-window layers' own RoPE (see {@link layerRopeConfig}). */
export function usesLocalRope(c: ModelConfig, l: number): boolean {
  return c.localRopeTheta !== undefined && (c.slidingWindowLayers?.includes(l) ?? false);
}

/**
 * The attention window of layer `l` (model index): `slidingWindow` on the layers of
 * `slidingWindowLayers`, `null` (the whole context) elsewhere.
 */
export function layerWindow(c: ModelConfig, l: number): number | null {
  return c.slidingWindow !== null && (c.slidingWindowLayers?.includes(l) ?? false)
    ? c.slidingWindow
    : null;
}

/** Parameter count of a config (embedding counted once when tied). */
export function parameterCount(c: ModelConfig): number {
  let n = 0;
  for (const t of expectedTensors(c)) n += t.shape.reduce((a, b) => a * b, 1);
  return n;
}
